"""The progress cache: a reading is reused for a few seconds, never across a Job's completion."""

from __future__ import annotations

from kubejury.records.progress import ProgressRecord
from kubejury_operator.observed import JobState, Observed
from kubejury_operator.progress_cache import PROGRESS_MAX_AGE_SECONDS, ProgressCache
from kubejury_operator.vocabulary import aggregation_job_name

RUN = ("evals", "r")
RECORD = ProgressRecord(stage="generate", series="primary", name="a", done=3, total=10)
READING = ({("generate", "primary", "a"): RECORD}, None)


def test_a_reading_is_reused_while_young_and_no_job_finished() -> None:
    running = Observed(jobs={"kj-r-gen-a-primary": JobState()})
    cache = ProgressCache()
    assert cache.fresh(RUN, running, now=0.0) is None
    cache.store(RUN, running, READING, now=0.0)
    assert cache.fresh(RUN, running, now=PROGRESS_MAX_AGE_SECONDS - 0.1) == READING
    assert cache.fresh(RUN, running, now=PROGRESS_MAX_AGE_SECONDS) is None
    assert cache.fresh(("evals", "other"), running, now=0.1) is None


def test_the_aggregation_finishing_makes_the_next_reconcile_read_again() -> None:
    """Its report and the final counters go into ``Succeeded``; other Jobs' completions count from
    the Jobs themselves, so they do not need a fresh reading."""
    aggregation = aggregation_job_name("r")
    cache = ProgressCache()
    cache.store(RUN, Observed(jobs={aggregation: JobState()}), READING, now=0.0)
    generated = Observed(jobs={aggregation: JobState(), "kj-r-gen-a-primary": JobState(succeeded=True)})
    assert cache.fresh(RUN, generated, now=0.1) == READING
    assert cache.fresh(RUN, Observed(jobs={aggregation: JobState(succeeded=True)}), now=0.1) is None
    cache.forget(RUN)
    assert cache.fresh(RUN, Observed(jobs={aggregation: JobState()}), now=0.1) is None
