"""Argument checks of the stage functions (an :class:`~asepr.storage.errors.InputError` naming the argument)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from asepr.storage.errors import InputError, format_problem

__all__ = ["check_float", "check_int"]


def check_int(name: str, value: Any, low: int) -> int:
    """``value`` as an int, or InputError unless it is an integer (not a bool) >= ``low``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InputError(format_problem(f"argument {name}", f"an integer >= {low}", repr(value)))
    return int(value)


def check_float(name: str, value: Any) -> float:
    """``value`` as a float, or InputError unless it is a finite number >= 0."""
    if not isinstance(value, (int, float, np.floating)) or not math.isfinite(value) or value < 0:
        raise InputError(format_problem(f"argument {name}", "a finite number >= 0", repr(value)))
    return float(value)
