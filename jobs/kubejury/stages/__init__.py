"""The pipeline's stages as library calls: generation, judging, and their progress records.

Local mode (``kubejury run``) and the operator's Jobs (``kubejury generate``/``judge``) call the
same coroutines, so there is one code path to test and to benchmark:

- :func:`run_generation` — one model, one series, every question → answers shards.
- :func:`run_judging` — one judge, one series, every anonymized answer → judgments shards.
- :func:`~kubejury.stages.generate.read_answers` / :func:`~kubejury.stages.judge.read_judgments` —
  one typed record per key, whatever retries left behind (imported from their modules).
- :func:`run_async` — run a coroutine on uvloop (less CPU per request).

Both stages resume (already stored records are skipped), write immutable shards through
:mod:`kubejury.files.storage`, keep a progress record up to date, and raise
:class:`EndpointUnavailable` when the model server cannot be reached (what was done is kept).
"""

from __future__ import annotations

from kubejury.stages.generate import run_generation
from kubejury.stages.judge import parse_failure_count, run_judging
from kubejury.stages.progress import ProgressTracker, ProgressView, RichProgressView
from kubejury.stages.runner import EndpointUnavailable, StageFailed, StageOptions, StageSummary, run_async

__all__ = [
    "EndpointUnavailable",
    "ProgressTracker",
    "ProgressView",
    "RichProgressView",
    "StageFailed",
    "StageOptions",
    "StageSummary",
    "parse_failure_count",
    "run_async",
    "run_generation",
    "run_judging",
]
