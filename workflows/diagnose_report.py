"""The "why local models differ" block of ``asepr inspect --diagnose``: the summary of
:func:`asepr.pipeline.diagnose.diagnose_output` as text (docs/design.md#diagnostics)."""

from __future__ import annotations

from typing import Any

__all__ = ["diagnostics_text"]

_BASIS = {"train": "training masters", "labelled": "labelled masters (the output has no training split)"}


def _number(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def diagnostics_text(summary: dict[str, Any]) -> str:
    """A short block: label divergence, receptive-field coverage and seeds per partition
    (a rank trains one partition when ``asepr train --nproc`` is k)."""
    s = summary
    hops = s["hops"]
    worst_jsd = "" if s.get("jsd_max_part") is None else f" (partition {s['jsd_max_part']})"
    worst_cov = "" if s.get("coverage_min_part") is None else f" (partition {s['coverage_min_part']})"
    lines = [
        f"why local models differ ({s['partitions']} partitions; seeds: {_BASIS.get(s['basis'], s['basis'])})",
        (f"  {'label JSD vs global (bits)':30s} mean {_number(s['jsd_mean'], '.3f')}, "
         f"max {_number(s['jsd_max'], '.3f')}{worst_jsd}"),
        (f"  {f'{hops}-hop coverage':30s} mean {_number(s['coverage_mean'], '.3f')}, "
         f"min {_number(s['coverage_min'], '.3f')}{worst_cov}, max {_number(s['coverage_max'], '.3f')}"),
        (f"  {'seeds per partition':30s} min {_number(s['seeds_min'], ',.0f')}, "
         f"mean {_number(s['seeds_mean'], ',.1f')}, max {_number(s['seeds_max'], ',.0f')}"),
        ("  (JSD: 0 = the global label mix, 1 = disjoint labels; coverage: the share of a seed's "
         f"{hops}-hop in-walks stored in its partition)"),
    ]
    return "\n".join(lines)
