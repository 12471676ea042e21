"""The report's GPU cost: GPU-hours per model, W per GPU-hour next to W, the run's idle share —
from the usage the operator hands the aggregation Job."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from report_fixture import MODELS, Fixture, write_fixture

from kubejury.records.gpu_usage import (
    GPU_USAGE_ENV,
    GpuUsage,
    GpuUsageError,
    ServerGpuUsage,
    from_environment,
)
from kubejury.report import render_all
from kubejury.report.aggregate import Analysis, aggregate
from kubejury.report.json_report import load_schema
from kubejury.stats.scoring import ScoringConfig


@pytest.fixture(scope="module")
def analysis(tmp_path_factory: pytest.TempPathFactory) -> Analysis:
    fixture: Fixture = write_fixture(tmp_path_factory.mktemp("run"))
    return aggregate(
        fixture.benchmark,
        fixture.judgments_dir,
        answers=fixture.answers_dir,
        config=ScoringConfig(bootstrap_samples=50, seed=3),
    )


def usage() -> GpuUsage:
    first, second = list(MODELS)[:2]
    return GpuUsage(
        (
            ServerGpuUsage(first, "model", 4, "NVIDIA-H100-80GB-HBM3", 4 * 1800.0, 4 * 1620.0),
            ServerGpuUsage(second, "model", 1, "NVIDIA-L4", 3600.0, 3240.0),
            ServerGpuUsage("judge-a", "judge", 8, "NVIDIA-H100-80GB-HBM3", 8 * 900.0, 8 * 810.0),
        )
    )


def test_the_report_carries_gpu_hours_and_quality_per_gpu_hour_and_validates(analysis: Analysis) -> None:
    files = render_all(analysis, gpu_usage=usage())
    document = json.loads(files["report.json"])
    jsonschema.validate(document, load_schema())
    section = document["gpu_usage"]
    first = section["servers"][next(iter(MODELS))]
    weighted = document["series"][document["primary_series"]]["models"][next(iter(MODELS))]["weighted"]
    assert first["held_gpu_hours"] == 2.0
    assert first["weighted_per_gpu_hour"] == pytest.approx(weighted / 2.0, abs=1e-3)
    assert section["servers"]["judge-a"]["weighted_per_gpu_hour"] is None
    assert section["idle_share"] == pytest.approx(0.1)
    markdown = files["report.md"].decode()
    assert "## GPU cost" in markdown and "held idle: 10.0%" in markdown
    assert "4 × H100-80GB-HBM3" in markdown
    assert "GPU cost" in files["report.html"].decode()


def test_without_usage_the_report_has_no_gpu_section(analysis: Analysis) -> None:
    files = render_all(analysis)
    assert "gpu_usage" not in json.loads(files["report.json"])
    assert "GPU cost" not in files["report.md"].decode()


def test_the_aggregation_job_reads_the_operators_variable_and_refuses_a_broken_one() -> None:
    assert from_environment({}) is None
    text = json.dumps(usage().to_json())
    assert from_environment({GPU_USAGE_ENV: text}) == usage()
    with pytest.raises(GpuUsageError, match=GPU_USAGE_ENV):
        from_environment({GPU_USAGE_ENV: "{not json"})


def test_docs_name_the_section(tmp_path: Path) -> None:
    docs = (Path(__file__).resolve().parents[2] / "docs" / "report-schema.md").read_text()
    assert "`gpu_usage`" in docs
