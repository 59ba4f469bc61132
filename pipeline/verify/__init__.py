"""``asepr verify``: every invariant of a committed partition output, checked.

``output`` (:func:`verify_output`: the checks, their tasks and the report), ``stores``
(one read per store array: checksums, CSR), ``edges`` (the edge multiset: bucket
counts and fingerprints), ``nodes`` (node rows against the input) and ``state`` (the
partitioner state against the stores).
"""

from asepr.pipeline.verify.output import Problem, VerifyReport, verify_output

__all__ = ["Problem", "VerifyReport", "verify_output"]
