"""The input directory: its format, the one way in, and what is written or derived from it.

The format (:mod:`~storage.inputs.schema`), opening an input once
(:mod:`~storage.inputs.directory`, ``open_input``), writing one
(:mod:`~storage.inputs.writer`, shared by the importers), ``asepr clean``
(:mod:`~storage.inputs.clean`, with the duplicate counter :mod:`~storage.inputs.dedup`),
the decoded copies a partition run writes while validating
(:mod:`~storage.inputs.decoded_copy`, :mod:`~storage.inputs.decoded`,
:mod:`~storage.inputs.node_table`) and ``.npy`` reads that are safe from many threads
(:mod:`~storage.inputs.npy`).
"""
