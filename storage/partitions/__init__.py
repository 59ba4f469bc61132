"""The partitioned output's format: the per-partition Zarr stores, the manifest, the state.

One store per partition (:mod:`~asepr.storage.partitions.store`, read through the zarr stores
of :mod:`~asepr.storage.partitions.chunk_stores`), an output's committed stores
(:mod:`~asepr.storage.partitions.output_stores`), ``manifest.json``
(:mod:`~asepr.storage.partitions.manifest`), ``state.zarr`` for incremental ingest
(:mod:`~asepr.storage.partitions.state`) and node columns read while an ingest may be replacing
the output (:mod:`~asepr.storage.partitions.reader`).
"""
