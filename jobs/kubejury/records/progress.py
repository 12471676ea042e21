"""A stage's progress record and the name of the file it is stored in.

Why this module exists: the progress record is written by the stage Jobs
(:class:`kubejury.stages.progress.ProgressTracker`) and read by the operator to fill the EvalRun's
status and metrics. Both import :class:`ProgressRecord` from here, and the storage file name
``<stage>-<name>.json`` (one file per shard of a sharded stage:
``<stage>-<name>.shard-<index>-of-<count>.json``) is formatted by :func:`progress_file_name` and
parsed back by :func:`parse_progress_file_name`, so the two sides cannot disagree.

The counters of a stage have one definition, :class:`StageCounts`: the stage's tracker keeps
them, the progress record stores them (it extends them) and the stage's summary reports them.

Fields: ``stage``, ``series``, ``name``, the counters ``total``, ``done`` (records stored,
including those found from an earlier attempt), ``resumed`` (of which found at start), ``errors``
(records stored with an error, this attempt), ``parse_failures`` (judging: replies without a valid
score after re-asking), ``retries`` (HTTP retries), then ``rate_per_s`` (this attempt's completions per second),
``state`` (``running``, ``succeeded``, ``failed``), ``message``, ``started_at``, ``updated_at``
(ISO-8601 UTC), ``fingerprint`` (digest of what determined the stage's records, see
:mod:`kubejury.records.fingerprint`; empty from older Jobs).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from typing import Any, Literal, get_args

ProgressState = Literal["running", "succeeded", "failed"]
PROGRESS_STATES: tuple[str, ...] = get_args(ProgressState)


class ProgressRecordError(ValueError):
    """A stored progress record that is not a progress record (wrong type of a field)."""


@dataclass(frozen=True)
class StageCounts:
    """How much of one stage run's work is done: the counters of a stage, defined once."""

    total: int = 0  # items of the stage
    done: int = 0  # records stored, those found from an earlier attempt included
    resumed: int = 0  # of which found at start
    errors: int = 0  # records stored with an error, this attempt
    parse_failures: int = 0  # judge replies without a valid score after re-asking, resumed included
    retries: int = 0  # HTTP retries

    @property
    def written(self) -> int:
        """Records stored by this attempt."""
        return self.done - self.resumed

    def advanced(self, *, error: bool = False, parse_failure: bool = False) -> StageCounts:
        """The counts with one more record stored."""
        return StageCounts(
            total=self.total,
            done=self.done + 1,
            resumed=self.resumed,
            errors=self.errors + error,
            parse_failures=self.parse_failures + parse_failure,
            retries=self.retries,
        )

    def retried(self, count: int) -> StageCounts:
        """The counts with ``count`` more HTTP retries."""
        return replace(self, retries=self.retries + count)

    def counters(self) -> dict[str, int]:
        """The counters alone, by name (to build a record that extends them)."""
        return {f.name: getattr(self, f.name) for f in fields(StageCounts)}

    @staticmethod
    def added(parts: Iterable[StageCounts]) -> StageCounts:
        """The counts of several shards of one stage together."""
        items = list(parts)
        return StageCounts(**{f.name: sum(getattr(p, f.name) for p in items) for f in fields(StageCounts)})


@dataclass(frozen=True)
class ProgressRecord(StageCounts):
    """How far one stage (one model's generation or one judge's judging of one series) has got:
    its :class:`StageCounts` and what the operator shows beside them.

    Every field has a default so a record written by an older Job (fewer fields) still reads.
    """

    stage: str = ""
    series: str = ""
    name: str = ""
    rate_per_s: float = 0.0
    state: ProgressState = "running"
    message: str = ""
    started_at: str = ""
    updated_at: str = ""
    fingerprint: str = ""

    @property
    def complete(self) -> bool:
        """The stage finished all its work (the operator counts it done even without its Job)."""
        return self.state == "succeeded"

    @property
    def running(self) -> bool:
        return self.state == "running"

    def to_json(self) -> dict[str, Any]:
        """The stored form: one key per field, spelt as the field."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProgressRecord:
        """Read the stored form back; a missing field takes its default, a mistyped one raises
        :class:`ProgressRecordError` naming it. Unknown keys are ignored (a newer writer)."""
        values: dict[str, Any] = {}
        for f in fields(cls):
            if f.name in data:
                values[f.name] = _typed(f.name, data[f.name], type(f.default))
        if values.get("state", "running") not in PROGRESS_STATES:
            raise ProgressRecordError(
                f"progress record field 'state': {values['state']!r} is not one of {', '.join(PROGRESS_STATES)}"
            )
        return cls(**values)


def _typed(name: str, value: Any, kind: type) -> Any:
    """``value`` as the field's type (int, float or str); an int is a float, a bool is nothing."""
    if isinstance(value, bool):
        pass
    elif kind is int and isinstance(value, int):
        return value
    elif kind is float and isinstance(value, int | float):
        return float(value)
    elif kind is str and isinstance(value, str):
        return value
    raise ProgressRecordError(
        f"progress record field {name!r}: {value!r} is not a{'n' if kind is int else ''} {kind.__name__}"
    )


def merge_shards(parts: Sequence[ProgressRecord], shard_count: int) -> ProgressRecord:
    """One record for a stage run as ``shard_count`` shards, from the shards that reported so far.

    Counts and rates add up; it is ``succeeded`` only when every shard reported and succeeded
    (one finished shard must not stand for the whole stage), ``running`` while any shard runs,
    ``failed`` when a shard failed and none runs. Totals cover only the shards reported so far.
    """
    first = parts[0] if parts else ProgressRecord()
    state: ProgressState
    if len(parts) >= shard_count and all(p.complete for p in parts):
        state = "succeeded"
    elif any(p.running for p in parts) or not any(p.state == "failed" for p in parts):
        state = "running"
    else:
        state = "failed"
    return ProgressRecord(
        **StageCounts.added(parts).counters(),
        stage=first.stage,
        series=first.series,
        name=first.name,
        rate_per_s=sum(p.rate_per_s for p in parts),
        state=state,
        message="; ".join(p.message for p in parts if p.message),
        started_at=min((p.started_at for p in parts if p.started_at), default=""),
        updated_at=max((p.updated_at for p in parts if p.updated_at), default=""),
        fingerprint=first.fingerprint,
    )


# ------------------------------------------------------------------------------ the file name

_SUFFIX = ".json"
_SHARD = re.compile(r"^(?P<name>.+)\.shard-(?P<index>\d+)-of-(?P<count>\d+)$")


@dataclass(frozen=True)
class ProgressFile:
    """What a progress record's file name says: whose record it is, and which shard."""

    stage: str
    name: str
    shard: tuple[int, int] | None = None  # (index, count)


def progress_file_name(stage: str, name: str, shard: tuple[int, int] | None = None) -> str:
    """``<stage>-<name>.json``, or ``<stage>-<name>.shard-<index>-of-<count>.json`` for one shard.

    ``stage`` must not contain ``-`` (the first ``-`` separates it from ``name``).
    """
    if "-" in stage or not stage or not name:
        raise ValueError(
            f"progress file of stage {stage!r} and name {name!r}: stage needs no '-', both non-empty"
        )
    who = name if shard is None else f"{name}.shard-{shard[0]}-of-{shard[1]}"
    return f"{stage}-{who}{_SUFFIX}"


def parse_progress_file_name(key: str) -> ProgressFile | None:
    """The inverse of :func:`progress_file_name` for a storage key ending in such a file name;
    ``None`` for anything else in the progress folder."""
    file = key.rsplit("/", 1)[-1]
    if not file.endswith(_SUFFIX):
        return None
    stage, _, who = file[: -len(_SUFFIX)].partition("-")
    if not stage or not who:
        return None
    match = _SHARD.match(who)
    if match is None:
        return ProgressFile(stage, who)
    return ProgressFile(stage, match["name"], (int(match["index"]), int(match["count"])))
