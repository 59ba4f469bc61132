"""Validation and integrity: what is checked before data is used.

Streaming validation of an input (:mod:`~asepr.storage.integrity.validate`) and of new shards
for a partitioned output (:mod:`~asepr.storage.integrity.validate_increment`), their per-batch
checks (:mod:`~asepr.storage.integrity.checks`) and report (:mod:`~asepr.storage.integrity.report`),
and the checked reads of a partition store's arrays
(:mod:`~asepr.storage.integrity.checked_array`).
"""
