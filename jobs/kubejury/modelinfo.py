"""What reports need to know about a model besides its scores: size, quantization, family.

Sizes are written by people as ``"27B"``, ``"0.27B"``, ``"270M"`` or ``"26B-A4B"`` (total and
active parameters of a mixture of experts); this module parses them once, for the reports'
quality-to-size analysis and for GPU placement's memory estimate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SIZE = re.compile(
    r"^\s*(?P<total>\d+(?:\.\d+)?)\s*(?P<unit>[KMBT])\s*(?:-?\s*A(?P<active>\d+(?:\.\d+)?)\s*(?P<aunit>[KMBT])?)?\s*$",
    re.I,
)
_UNIT = {"K": 1e3, "M": 1e6, "B": 1e9, "T": 1e12}


def parse_parameters(text: str | float | int | None) -> float | None:
    """Total parameter count from ``"27B"``, ``"0.27B"``, ``"270M"``, ``"26B-A4B"`` or a number.

    Returns ``None`` for ``None``; raises ``ValueError`` with the accepted forms otherwise.
    """
    if text is None:
        return None
    if isinstance(text, int | float):
        if text <= 0:
            raise ValueError(f"parameter count must be positive, got {text}")
        return float(text)
    match = _SIZE.match(text)
    if not match:
        raise ValueError(
            f"cannot read parameter count {text!r}: write e.g. '27B', '0.27B', '270M' or '26B-A4B'"
        )
    return float(match["total"]) * _UNIT[match["unit"].upper()]


def parse_active_parameters(text: str | None) -> float | None:
    """Active parameters of a mixture of experts (``"26B-A4B"`` → 4e9), else the total."""
    if text is None:
        return None
    match = _SIZE.match(text)
    if not match:
        raise ValueError(f"cannot read parameter count {text!r}")
    if match["active"] is None:
        return parse_parameters(text)
    unit = (match["aunit"] or match["unit"]).upper()
    return float(match["active"]) * _UNIT[unit]


@dataclass(frozen=True)
class ModelInfo:
    """Report-facing facts about one evaluated model; every field but the name is optional."""

    name: str
    parameters: float | None = None  # total parameters
    parameters_label: str | None = None  # as written, e.g. "26B-A4B"
    quantization: str | None = None
    family: str | None = None
    gpu_memory_gib: float | None = None  # memory it was served with, when known
