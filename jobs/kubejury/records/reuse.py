"""What a run copied from earlier runs, and what it refused to copy: the reuse document.

Why this module exists: the reuse step (:mod:`kubejury.stages.reuse`, run by ``kubejury reuse`` in
a CPU-only Job and by ``kubejury run`` before its stages) copies answers and judgments of earlier
runs whose every determining part is the same, then writes one document at
``<run>/reuse.json`` (:meth:`kubejury.files.storage.RunLayout.reuse_key`). The operator reads it to
skip servers and stages with nothing left to do and to fill ``status.reuse``; the aggregation reads
it for the report's reuse section; ``plan --estimate`` builds the same document without writing
to count the GPU-hours saved. One definition for all of them; :meth:`ReuseDocument.from_json` is
the one reader (format 1 is the first).

A stage is one model's generation or one judge's judging of one series:

- ``reused``: records copied, by source run (``from_runs``);
- ``needed``: records the stage needs that the reuse step could know of (every question for a
  generation; every answer stored after the answers were copied, for a judging);
- ``complete``: every record the stage will ever need was copied, so it has nothing left to run (a
  judging stage is complete only when every model's answers were copied too);
- ``covered_models`` (judging): models whose every answer has a copied judgment, so a judging
  round started for them alone would have nothing to do;
- ``refused``: why records of a source were not copied, one readable reason per differing part
  ("judge judge-gemma: prompt template changed") or question ("question d3-l2-7 changed").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

REUSE_FORMAT = 1


class ReuseDocumentError(ValueError):
    """A stored reuse document that is not one; the message names the field."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """Records of ``source`` not copied, and why (``reason`` names the part or question)."""

    source: str
    reason: str
    records: int = 0  # how many records the reason kept from being copied (0: the whole stage)

    def to_json(self) -> dict[str, Any]:
        return {"source": self.source, "reason": self.reason, "records": self.records}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Refusal:
        item = _mapping(data, where)
        return cls(
            source=_text(item, "source", where),
            reason=_text(item, "reason", where),
            records=_count(item, "records", where),
        )


@dataclass(frozen=True, slots=True)
class StageReuse:
    """What one stage (``generate`` of a model, ``judge`` of a judge) of one series reused."""

    stage: str
    series: str
    name: str
    needed: int
    from_runs: Mapping[str, int] = field(default_factory=dict)
    complete: bool = False
    refused: tuple[Refusal, ...] = ()
    # judging only: models every one of whose answers (after the copy) has a copied judgment
    covered_models: tuple[str, ...] = ()

    @property
    def reused(self) -> int:
        return sum(self.from_runs.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "stage": self.stage,
            "series": self.series,
            "name": self.name,
            "needed": self.needed,
            "reused": self.reused,
            "from_runs": dict(sorted(self.from_runs.items())),
            "complete": self.complete,
            "refused": [r.to_json() for r in self.refused],
            "covered_models": list(self.covered_models),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> StageReuse:
        item = _mapping(data, where)
        runs = _mapping(item.get("from_runs", {}), f"{where}.from_runs")
        refused = item.get("refused", [])
        if not isinstance(refused, list):
            raise ReuseDocumentError(f"reuse document field {where}.refused: must be a list")
        complete = item.get("complete", False)
        if not isinstance(complete, bool):
            raise ReuseDocumentError(f"reuse document field {where}.complete: must be true or false")
        return cls(
            stage=_text(item, "stage", where),
            series=_text(item, "series", where),
            name=_text(item, "name", where),
            needed=_count(item, "needed", where),
            from_runs={str(k): _count(runs, k, f"{where}.from_runs") for k in runs},
            complete=complete,
            refused=tuple(Refusal.from_json(r, f"{where}.refused[{i}]") for i, r in enumerate(refused)),
            covered_models=tuple(str(m) for m in _list(item, "covered_models", where)),
        )


@dataclass(frozen=True, slots=True)
class ReuseDocument:
    """Every stage's reuse in a run, and the source runs in the order they were preferred."""

    sources: tuple[str, ...]
    stages: tuple[StageReuse, ...] = ()
    missing_sources: tuple[Refusal, ...] = ()  # a named run that could not be read at all

    def stage(self, stage: str, series: str, name: str) -> StageReuse | None:
        for entry in self.stages:
            if (entry.stage, entry.series, entry.name) == (stage, series, name):
                return entry
        return None

    def complete(self, stage: str, series: str, name: str) -> bool:
        """The stage has nothing left to run: every record it needs was copied."""
        entry = self.stage(stage, series, name)
        return entry is not None and entry.complete

    def reused_by(self, stage: str) -> dict[str, dict[str, int]]:
        """Model (or judge) → source run → records copied, over every series of ``stage``."""
        out: dict[str, dict[str, int]] = {}
        for entry in self.stages:
            if entry.stage != stage:
                continue
            per_run = out.setdefault(entry.name, {})
            for run, count in entry.from_runs.items():
                per_run[run] = per_run.get(run, 0) + count
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "format": REUSE_FORMAT,
            "sources": list(self.sources),
            "missing_sources": [r.to_json() for r in self.missing_sources],
            "stages": [s.to_json() for s in self.stages],
        }

    @classmethod
    def from_json(cls, data: Any) -> ReuseDocument:
        """Read a stored document (any format this kubejury knows); a wrong field raises
        :class:`ReuseDocumentError` naming it."""
        doc = _mapping(data, "(document)")
        version = doc.get("format", 1)
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise ReuseDocumentError(f"reuse document field 'format': {version!r} is not a format number")
        if version > REUSE_FORMAT:
            raise ReuseDocumentError(
                f"reuse document field 'format': format {version} is newer than this kubejury reads "
                f"({REUSE_FORMAT})"
            )
        sources = doc.get("sources", [])
        stages = doc.get("stages", [])
        missing = doc.get("missing_sources", [])
        for key, value in (("sources", sources), ("stages", stages), ("missing_sources", missing)):
            if not isinstance(value, list):
                raise ReuseDocumentError(f"reuse document field {key!r}: must be a list")
        return cls(
            sources=tuple(str(s) for s in sources),
            stages=tuple(StageReuse.from_json(s, f"stages[{i}]") for i, s in enumerate(stages)),
            missing_sources=tuple(
                Refusal.from_json(r, f"missing_sources[{i}]") for i, r in enumerate(missing)
            ),
        )


def report_section(document: ReuseDocument) -> dict[str, Any]:
    """report.json's ``reuse`` (``kubejury.records.report.ReuseSection``): per model and per judge,
    over every series, the records copied and from which run; every refusal, each once."""
    sections: dict[str, dict[str, dict[str, Any]]] = {"generate": {}, "judge": {}}
    refused: list[dict[str, Any]] = []
    for stage in document.stages:
        entry = sections[stage.stage].setdefault(stage.name, {"reused": 0, "needed": 0, "from_runs": {}})
        entry["reused"] += stage.reused
        entry["needed"] += stage.needed
        for run, count in stage.from_runs.items():
            entry["from_runs"][run] = entry["from_runs"].get(run, 0) + count
        refused.extend(r.to_json() for r in stage.refused if r.to_json() not in refused)
    return {
        "sources": list(document.sources),
        "models": sections["generate"],
        "judges": sections["judge"],
        "refused": refused,
        "missing_sources": [r.to_json() for r in document.missing_sources],
    }


def stages_of(document: ReuseDocument | None, stage: str) -> Sequence[StageReuse]:
    return () if document is None else tuple(s for s in document.stages if s.stage == stage)


def _mapping(data: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(data, Mapping):
        raise ReuseDocumentError(f"reuse document field {where}: must be an object")
    return data


def _list(item: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = item.get(key, [])
    if not isinstance(value, list):
        raise ReuseDocumentError(f"reuse document field {where}.{key}: must be a list")
    return value


def _text(item: Mapping[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise ReuseDocumentError(f"reuse document field {where}.{key}: must be a string")
    return value


def _count(item: Mapping[str, Any], key: str, where: str) -> int:
    value = item.get(key, 0)
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ReuseDocumentError(f"reuse document field {where}.{key}: must be a count (integer ≥ 0)")
    return value
