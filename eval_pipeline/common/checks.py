"""Type checks shared by every settings validator.

`bool` is a subclass of `int` in Python, so `isinstance(True, int)` holds and a config value
of `true` would pass as the number 1. Every validator that wants a number asks these instead,
so that rule lives in one place.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from numbers import Integral, Real
from typing import TypeGuard


# The checks narrow for the type checker to int / float: numpy's integer and floating scalars pass
# too, and behave as int / float wherever a checked value goes.
def is_integer(value: object) -> TypeGuard[int]:
    """An integer that is not a bool."""
    return isinstance(value, Integral) and not isinstance(value, bool)


def is_real(value: object) -> TypeGuard[float]:
    """A real number (int or float) that is not a bool; NaN and infinities included."""
    return isinstance(value, Real) and not isinstance(value, bool)


def is_finite(value: object) -> TypeGuard[float]:
    """A real number that is not a bool, NaN or infinite."""
    return is_real(value) and math.isfinite(float(value))


def finite_number(value: object) -> float | None:
    """`value` as a float when it is a finite real number, else None (missing, NaN, infinite
    or not a number): a measurement that may be absent."""
    return float(value) if is_finite(value) else None


def finite_values(values: object, name: str):
    """A new 1-D float64 numpy array of finite values, or an error naming ``name``: TypeError
    for a string or a mapping, ValueError for anything else.

    NaN is rejected rather than dropped: a NaN per-question metric means an abstention
    question slipped in (or a scoring bug), and silently skipping it would change ``n``.
    """
    # deferred: the modules that import these checks load no numpy until they compute (test_bm25)
    import numpy as np  # noqa: PLC0415

    if isinstance(values, (str, bytes)):
        raise TypeError(f"{name} must be a sequence of numbers, got the string {values!r}")
    if isinstance(values, Mapping):
        raise TypeError(f"{name} must be a sequence of numbers, got a mapping")
    try:
        arr = np.array(values, dtype="float64", copy=True)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a sequence of numbers: {exc}") from exc
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {arr.shape}")
    bad = ~np.isfinite(arr)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name} must be finite numbers; position {first} is {arr[first]!r}")
    return arr


def check_resamples(n_resamples: object) -> int:
    """A bootstrap's resample count: an integer >= 1."""
    if not is_integer(n_resamples) or n_resamples < 1:
        raise ValueError(f"n_resamples must be an integer >= 1, got {n_resamples!r}")
    return int(n_resamples)


def check_seed(seed: object) -> int:
    """A random seed: an integer >= 0."""
    if not is_integer(seed) or seed < 0:
        raise ValueError(f"seed must be an integer >= 0, got {seed!r}")
    return int(seed)


def missing(value: object) -> bool:
    """Whether a table cell holds nothing: None, NaN or pandas' NA. pandas stores a None in a
    column beside strings as NaN (and Parquet keeps it), so `cell is None` misses it."""
    if value is None or type(value).__name__ == "NAType":
        return True
    return isinstance(value, float) and value != value


def is_text(value: object) -> TypeGuard[str]:
    """A string with something in it besides whitespace."""
    return isinstance(value, str) and bool(value.strip())


def as_flag(value: object) -> bool | None:
    """A bool (Python's or numpy's, as a pandas row gives) as a Python bool; None otherwise
    (0, 1, "false", None are not flags)."""
    numpy_bool = getattr(getattr(value, "dtype", None), "kind", None) == "b" and getattr(value, "ndim", 1) == 0
    return bool(value) if isinstance(value, bool) or numpy_bool else None  # numpy not imported: this module is light


def unit_value(value: object, what: str) -> float | None:
    """A metric in [0, 1] as a float; None for None/NaN (stored as NULL); ValueError otherwise."""
    if value is None:
        return None
    if not is_real(value):
        raise ValueError(f"{what} must be a number in [0, 1], NaN or None, got {value!r}")
    number = float(value)
    if math.isnan(number):
        return None
    if not 0.0 <= number <= 1.0:
        raise ValueError(f"{what} must be a number in [0, 1], NaN or None, got {value!r}")
    return number + 0.0
