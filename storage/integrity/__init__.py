"""Validation and integrity: what is checked before data is used.

Streaming validation of an input (:mod:`~storage.integrity.validate`) and of new shards
for a partitioned output (:mod:`~storage.integrity.validate_increment`), their per-batch
checks (:mod:`~storage.integrity.checks`) and report (:mod:`~storage.integrity.report`),
and the checked reads of a partition store's arrays
(:mod:`~storage.integrity.checked_array`).
"""
