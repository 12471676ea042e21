"""Specification of kubejury.records.run_status: the EvalRun status, one record written and read.

The operator writes :meth:`RunStatus.to_json` with a JSON merge patch and reads the stored status
back with :meth:`RunStatus.from_json` on its next reconcile; ``kubejury status`` reads it too. So
what is written must read back into the same record, the nulls must be where a merge patch needs
them, and a status of another shape must still read.
"""

from __future__ import annotations

import json
from typing import Any

from kubejury.records.gpu_usage import GpuUsage, ServerGpuUsage
from kubejury.records.placement import NOT_DEPLOYED, Placement
from kubejury.records.run_status import (
    BudgetStatus,
    ModelBudget,
    RankingRow,
    RunCondition,
    RunStatus,
    RunSummary,
    StageCounts,
)
from kubejury_operator.status import summary_from_report


def _without_nulls(value: Any) -> Any:
    """What the API server keeps of a merge patch: keys set to null are gone."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


def _through_etcd(document: dict[str, Any]) -> dict[str, Any]:
    stored: dict[str, Any] = json.loads(json.dumps(_without_nulls(document)))
    return stored


def succeeded_status() -> RunStatus:
    return RunStatus(
        phase="Succeeded",
        observed_generation=3,
        progress="48/48",
        started_at="2026-12-01T10:00:00Z",
        completed_at="2026-12-01T11:00:00Z",
        conditions=(
            RunCondition("Ready", "True", "Succeeded", "The run is succeeded.", "2026-12-01T11:00:00Z", 3),
            RunCondition("Failed", "False", "NoFailure", "Nothing has failed.", "2026-12-01T10:00:00Z", 3),
        ),
        stages=(
            StageCounts("generation", 24, 24, 2, 2, {"qwen": (12, 12), "gemma": (12, 12)}),
            StageCounts("judging", 24, 24, 2, 2, {"gemma": (12, 12), "gpt": (12, 12)}),
            StageCounts("aggregation", 1, 1),
        ),
        placement=(
            Placement(
                name="qwen",
                runtime="vllm",
                quantization="awq",
                tensor_parallel_size=2,
                gpu_product="NVIDIA-L4",
                node_selector={"nvidia.com/gpu.product": "NVIDIA-L4"},
                vllm_args=("--quantization", "awq"),
            ),
            Placement(
                name="gpt", runtime="openai", quantization="", tensor_parallel_size=0, code=NOT_DEPLOYED
            ),
        ),
        summary=RunSummary(
            primary_series="primary",
            report_uri="s3://bucket/runs/r/report/",
            ranking=(
                RankingRow(1, "qwen", 8.1, (7.9, 8.3), 0.2, 0.4, "A"),
                RankingRow(2, "gemma", None, (None, None), None, None, None),
            ),
            domain_leaders={"law": "qwen"},
            tiers={"qwen": "A"},
            leader="qwen",
            leader_weighted=8.1,
        ),
        gpu=GpuUsage(
            (
                ServerGpuUsage(
                    name="qwen", role="model", gpus=2, held_gpu_seconds=7200.0, used_gpu_seconds=6000.0
                ),
            )
        ),
    )


def test_a_written_status_reads_back_into_the_same_record_after_the_api_server_drops_its_nulls() -> None:
    status = succeeded_status()
    assert RunStatus.from_json(_through_etcd(status.to_json())) == status


def test_a_status_read_back_and_written_again_changes_nothing_the_api_server_keeps() -> None:
    stored = _through_etcd(succeeded_status().to_json())
    assert _without_nulls(RunStatus.from_json(stored).to_json()) == stored


def test_absent_times_and_gpu_are_written_as_null_so_the_merge_patch_deletes_them() -> None:
    written = RunStatus(phase="Pending", progress="0/0").to_json()
    assert written["startedAt"] is None and written["completedAt"] is None and written["gpu"] is None
    assert "summary" not in written


def test_the_status_json_has_exactly_the_keys_the_operator_has_always_written() -> None:
    written = succeeded_status().to_json()
    assert list(written) == [
        "phase",
        "observedGeneration",
        "conditions",
        "progress",
        "stages",
        "placement",
        "gpu",
        "startedAt",
        "completedAt",
        "summary",
    ]
    assert written["conditions"][0] == {
        "type": "Ready",
        "status": "True",
        "reason": "Succeeded",
        "message": "The run is succeeded.",
        "lastTransitionTime": "2026-12-01T11:00:00Z",
        "observedGeneration": 3,
    }
    assert written["placement"]["gpt"] == {
        "reason": "NotDeployed",
        "runtime": "openai",
        "quantization": "",
        "tensorParallelSize": 0,
    }


def test_the_status_keeps_a_placement_code_and_its_facts_and_no_prose() -> None:
    placed = Placement(
        name="m",
        runtime="vllm",
        quantization="fp8",
        tensor_parallel_size=1,
        gpu_product="NVIDIA-H100",
        reason="Hopper (CC 9.0): online FP8 of the bf16 checkpoint; TP 1 on 8 × NVIDIA-H100: needs 43.1 GiB",
        memory_gib=43.14,
    )
    written = RunStatus(placement=(placed,)).to_json()["placement"]["m"]
    assert written["reason"] == "PlacedOnGpu" and written["memoryGiB"] == 43.1
    assert "Hopper" not in json.dumps(written)


def test_the_full_format_of_the_benchmarks_before_design_keeps_the_prose_and_still_reads_back() -> None:
    placed = Placement(name="m", runtime="vllm", quantization="fp8", tensor_parallel_size=1, reason="why")
    written = RunStatus(placement=(placed,), full_placement=True).to_json()
    assert written["placement"]["m"]["reason"] == "why"
    assert RunStatus.from_json(written).placement[0].reason == "why"


def test_generation_counts_per_model_judging_per_judge_and_aggregation_only_its_one_item() -> None:
    stages = succeeded_status().to_json()["stages"]
    assert stages["generation"] == {
        "done": 24,
        "total": 24,
        "jobsDone": 2,
        "jobs": 2,
        "models": {"qwen": {"done": 12, "total": 12}, "gemma": {"done": 12, "total": 12}},
    }
    assert set(stages["judging"]) == {"done", "total", "jobsDone", "jobs", "judges"}
    assert stages["aggregation"] == {"done": 1, "total": 1}


def test_a_summary_without_a_primary_series_has_no_leaders_tiers_or_leader() -> None:
    summary = RunSummary(primary_series=None, report_uri="s3://b/r/", note="report.json is larger than 4 MiB")
    assert summary.to_json() == {
        "primarySeries": None,
        "reportUri": "s3://b/r/",
        "ranking": [],
        "note": "report.json is larger than 4 MiB",
    }


def test_the_operators_summary_of_a_report_reads_back_into_the_very_same_json() -> None:
    report = {
        "primary_series": "primary",
        "series": {
            "primary": {
                "ranking": ["b", "a"],
                "models": {
                    "a": {"weighted": 7.12345, "weighted_ci95": [6.9, 7.3], "judge_sigma": 0.4, "tier": "C"},
                    "b": {"weighted": 8.0, "weighted_ci95": [7.8, 8.2], "degradation": 0.1},
                },
                "domain_leaders": {"law": "b"},
            }
        },
    }
    written = summary_from_report(report, "s3://b/runs/r/report/")
    assert written["ranking"][0]["tier"] is None and written["leader"] == "b"
    assert RunSummary.from_json(written).to_json() == written


def test_a_status_not_written_yet_reads_as_pending_and_says_so() -> None:
    nothing: dict[str, Any] | None
    for nothing in (None, {}):
        status = RunStatus.from_json(nothing)
        assert status.phase == "Pending" and not status.written and not status.finished
    assert RunStatus.from_json({"phase": "Generating"}).written


def test_parts_of_another_shape_read_as_absent_instead_of_failing_the_reader() -> None:
    status = RunStatus.from_json(
        {
            "phase": "Judging",
            "conditions": {"type": "Ready"},
            "stages": ["generation"],
            "placement": {
                "qwen": {"tensorParallelSize": "two"},
                "gpt": "external",
                "gemma": {"runtime": "llamacpp"},
            },
            "summary": {"ranking": "none", "domainLeaders": ["law"]},
            "gpu": {"servers": ["broken"]},
        }
    )
    assert status.conditions == () and status.stages == ()
    assert [p.name for p in status.placement] == ["gemma"]
    assert status.summary == RunSummary(primary_series=None, report_uri=None)
    assert status.gpu == GpuUsage()


def test_an_older_stage_without_per_name_counts_reads_with_none() -> None:
    counts = RunStatus.from_json({"stages": {"generation": {"done": 3, "total": 4}}}).stage("generation")
    assert counts == StageCounts("generation", 3, 4)
    assert RunStatus().stage("judging") is None


def test_condition_finds_a_condition_by_type_and_is_true_reads_its_status() -> None:
    status = succeeded_status()
    ready = status.condition("Ready")
    assert ready is not None and ready.is_true
    failed = status.condition("Failed")
    assert failed is not None and not failed.is_true
    assert status.condition("Unschedulable") is None


def test_the_summary_keeps_the_primary_series_comparisons_and_reads_them_back() -> None:
    comparison = {
        "a": "a",
        "b": "b",
        "margin": 0.25,
        "origin": "automatic",
        "verdict": "undecided",
        "weighted": {
            "difference": -0.123456,
            "se": 0.1,
            "df": 40,
            "ci90": [-0.29, 0.04],
            "ci95": [-0.33, 0.08],
        },
        "questions_needed": {"equivalent": 410, "different": 380, "power": 0.8},
    }
    report = {
        "primary_series": "primary",
        "series": {
            "primary": {
                "ranking": ["b", "a"],
                "models": {"a": {"weighted": 7.0}, "b": {"weighted": 7.1}},
                "comparisons": [comparison],
            }
        },
    }
    written = summary_from_report(report, None)
    assert written["comparisons"] == [
        {
            "a": "a",
            "b": "b",
            "margin": 0.25,
            "difference": -0.123,
            "ci90": [-0.29, 0.04],
            "verdict": "undecided",
            "questionsNeeded": 410,
        }
    ]
    assert RunSummary.from_json(written).to_json() == written
    without = summary_from_report(
        {**report, "series": {"primary": {"ranking": ["a"], "models": {"a": {}}}}}, None
    )
    assert "comparisons" not in without


def test_status_budget_reads_back_and_is_absent_without_a_budget() -> None:
    budget = BudgetStatus(
        goal="leading-group",
        looks_done=2,
        looks=3,
        models={"weak": ModelBudget("stopped", 12, 1, "out: below a"), "a": ModelBudget("continue", 36, 2)},
    )
    written = RunStatus(budget=budget).to_json()
    assert written["budget"]["models"]["weak"] == {
        "status": "stopped",
        "questions": 12,
        "look": 1,
        "reason": "out: below a",
    }
    assert RunStatus.from_json(written).budget == budget
    assert "budget" not in RunStatus().to_json()
    assert RunStatus.from_json({"phase": "Generating", "budget": "junk"}).budget is None
