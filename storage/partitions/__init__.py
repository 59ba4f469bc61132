"""The partitioned output's format: the per-partition Zarr stores, the manifest, the state.

One store per partition (:mod:`~storage.partitions.store`, read through the zarr stores
of :mod:`~storage.partitions.chunk_stores`), an output's committed stores
(:mod:`~storage.partitions.output_stores`), ``manifest.json``
(:mod:`~storage.partitions.manifest`), ``state.zarr`` for incremental ingest
(:mod:`~storage.partitions.state`) and node columns read while an ingest may be replacing
the output (:mod:`~storage.partitions.reader`).
"""
