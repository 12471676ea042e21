"""Names that would collide with the run's storage layout are rejected when the spec is validated.

A series named ``report`` would share its folder with the reports, ``spec.json`` with the stored
spec; a model named ``m1.shard-0-of-2`` has the progress file name of shard 0 of model ``m1``.
Before issue 12 §4 all three were accepted.
"""

from __future__ import annotations

import pytest

from factories import build_evalrun, model_entry
from kubejury.config.spec import SpecError, parse_evalrun


@pytest.mark.parametrize("series", ["spec.json", "report", "progress", "spec-history"])
def test_a_series_named_like_a_run_level_file_or_folder_is_rejected(series: str) -> None:
    body = build_evalrun(series=[{"name": "t0"}, {"name": series, "temperature": 0.5}])
    with pytest.raises(SpecError, match=rf"spec\.series\[1\]\.name.*{series}.*reserved"):
        parse_evalrun(body)


@pytest.mark.parametrize("key", ["models", "judges"])
def test_a_name_that_reads_as_a_shard_of_another_is_rejected(key: str) -> None:
    entries = {"models": [model_entry("m1")], "judges": [model_entry("j1")]}
    entries[key].append(model_entry("m1.shard-0-of-2"))
    body = build_evalrun(models=entries["models"], judges=entries["judges"])
    with pytest.raises(SpecError, match=rf"spec\.{key}\[1\]\.name.*shard"):
        parse_evalrun(body)


def test_ordinary_dotted_names_stay_allowed() -> None:
    body = build_evalrun(models=[model_entry("qwen3.5-27b")], series=[{"name": "t0.8", "temperature": 0.8}])
    assert parse_evalrun(body).spec.series[0].name == "t0.8"
