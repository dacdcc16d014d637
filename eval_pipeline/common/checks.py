"""Type checks shared by every settings validator.

`bool` is a subclass of `int` in Python, so `isinstance(True, int)` holds and a config value
of `true` would pass as the number 1. Every validator that wants a number asks these instead,
so that rule lives in one place.
"""

from __future__ import annotations

import math
from numbers import Integral, Real


def is_integer(value: object) -> bool:
    """An integer that is not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: object) -> bool:
    """A real number (int or float) that is not a bool; NaN and infinities included."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_finite(value: object) -> bool:
    """A real number that is not a bool, NaN or infinite."""
    return is_real(value) and math.isfinite(float(value))
