"""One conversion of analysis results into plain JSON values.

The statistics return numpy arrays, numpy scalars, NaN for "undefined" and frozen dataclasses;
report.json wants lists, Python numbers and ``null``. Every ``to_dict()`` and the report builder
use this single function so that "undefined" is spelled the same way everywhere.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np


def to_json(value: Any, decimals: int | None = None) -> Any:
    """``value`` as plain JSON types: NaN/inf → ``None``, numpy → Python, tuples → lists, keys → str.

    With ``decimals``, floats are rounded to that many places (and ``-0.0`` becomes ``0.0``).
    Objects with a ``to_dict()`` and dataclasses are converted field by field.
    """
    if value is None or isinstance(value, bool | str):
        return value
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        if not math.isfinite(number):
            return None
        if decimals is None:
            return number
        rounded = round(number, decimals)
        return 0.0 if rounded == 0 else rounded  # no "-0.0"
    if isinstance(value, np.ndarray):
        return to_json(value.tolist(), decimals)
    if isinstance(value, Mapping):
        return {str(key): to_json(item, decimals) for key, item in value.items()}
    if isinstance(value, Sequence):
        return [to_json(item, decimals) for item in value]
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_json(to_dict(), decimals)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json({f.name: getattr(value, f.name) for f in dataclasses.fields(value)}, decimals)
    raise TypeError(f"cannot turn {type(value).__name__} into JSON")
