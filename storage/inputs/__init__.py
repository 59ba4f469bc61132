"""The input directory: its format, the one way in, and what is written or derived from it.

The format (:mod:`~asepr.storage.inputs.schema`), opening an input once
(:mod:`~asepr.storage.inputs.directory`, ``open_input``), writing one
(:mod:`~asepr.storage.inputs.writer`, shared by the importers), ``asepr clean``
(:mod:`~asepr.storage.inputs.clean`, with the duplicate counter :mod:`~asepr.storage.inputs.dedup`),
the decoded copies a partition run writes while validating
(:mod:`~asepr.storage.inputs.decoded_copy`, :mod:`~asepr.storage.inputs.decoded`,
:mod:`~asepr.storage.inputs.node_table`) and ``.npy`` reads that are safe from many threads
(:mod:`~asepr.storage.inputs.npy`).
"""
