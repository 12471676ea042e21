"""The fingerprint of a stage: what determined its records, as a digest and as readable parts.

Why this module exists: a stored answer is only the answer of the spec that asked it. Rerunning a
run after changing, say, the series' temperature used to reuse every stored answer under the new
spec. Each stage (one model's generation, one judge's judging, of one series) now has a
fingerprint; every record it writes carries the digest, and the fingerprint document (digest and
parts) is stored beside the stage's records, so a later run can say *what* changed. The stage
Jobs write it and the aggregation Job and ``kubejury run`` read it: one definition for both.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


def digest_of(parts: Mapping[str, str]) -> str:
    """A short stable digest (16 hex digits of SHA-256) of the parts, order-independent."""
    canonical = json.dumps(dict(sorted(parts.items())), ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class StageFingerprint:
    """``parts``: name → value (as text) of everything that determines the stage's records."""

    stage: str
    series: str
    name: str
    parts: Mapping[str, str] = field(default_factory=dict)
    # digests the same spec had under an earlier definition of the stage's parts: records and
    # documents stored with one of them are this stage's too (one place migrates: provenance)
    earlier_digests: tuple[str, ...] = field(default=(), compare=False)

    def accepts(self, digest: str | None) -> bool:
        """``digest`` is this stage's, under today's definition or an earlier one."""
        return digest == self.digest or digest in self.earlier_digests

    @property
    def digest(self) -> str:
        return digest_of(self.parts)

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "series": self.series,
            "name": self.name,
            "digest": self.digest,
            "parts": dict(sorted(self.parts.items())),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StageFingerprint:
        parts = data.get("parts")
        if not isinstance(parts, Mapping):
            raise ValueError("fingerprint document without 'parts'")
        return cls(
            stage=str(data.get("stage", "")),
            series=str(data.get("series", "")),
            name=str(data.get("name", "")),
            parts={str(k): str(v) for k, v in parts.items()},
        )

    def changes_from(self, before: StageFingerprint) -> list[str]:
        """What differs from ``before``, one readable item per part (``temperature: 0.0 → 0.5``)."""
        changes = []
        for key in sorted(set(self.parts) | set(before.parts)):
            old, new = before.parts.get(key, "(none)"), self.parts.get(key, "(none)")
            if old != new:
                changes.append(f"{key}: {_short(old)} → {_short(new)}")
        return changes


def _short(value: str) -> str:
    return value if len(value) <= 60 else value[:57] + "…"
