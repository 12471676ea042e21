"""The anonymization map of a series: which opaque id stands for which model in front of the judges.

Why this module exists: the first judging Job of a series writes the map to
``RunLayout.anonymization_key`` (apart from what judges see), every later judging Job of the series
compares its own map with it, and a person auditing a run reads it to turn the ids in the
judgments back into models. It crosses processes, so it is one frozen record with one reader, like
the other documents in :mod:`kubejury.records`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubejury.records.results import RecordFormatError

KIND = "anonymization map"


@dataclass(frozen=True, kw_only=True)
class AnonymizationMap:
    """``ids`` maps each opaque id to its model, stored in model order; ``seed`` drew the ids."""

    series: str
    seed: int
    ids: Mapping[str, str]

    def model_of(self, ident: str) -> str | None:
        """The model behind an opaque id, or ``None`` for an id this map did not draw."""
        return self.ids.get(ident)

    def to_json(self) -> dict[str, Any]:
        return {"series": self.series, "seed": self.seed, "ids": dict(self.ids)}

    @classmethod
    def from_json(cls, stored: Mapping[str, Any]) -> AnonymizationMap:
        """Read a stored map; a wrong field raises :class:`RecordFormatError` naming it."""
        series, seed, ids = stored.get("series"), stored.get("seed"), stored.get("ids")
        if not isinstance(series, str):
            raise _wrong("series", "a string")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise _wrong("seed", "an integer")
        if not isinstance(ids, Mapping):
            raise _wrong("ids", "an object of opaque id to model")
        for ident, model in ids.items():
            if not isinstance(model, str):
                raise _wrong(f"ids.{ident}", "a model name")
        return cls(series=series, seed=seed, ids=dict(ids))


def _wrong(field: str, expected: str) -> RecordFormatError:
    return RecordFormatError(f"{KIND} field {field!r}: must be {expected}")
