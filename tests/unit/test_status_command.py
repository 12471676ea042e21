"""``kubejury status`` renders an EvalRun's story from its status (pure; no cluster here —
``tests/integration/devcluster/test_status_command_on_cluster.py`` reads it from a real API server)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kubejury.cli import build_parser
from kubejury.commands.status import render
from kubejury.records.placement import Placement, placement_event_messages, placement_notes
from kubejury.records.run_status import RunStatus
from kubejury_operator.status import condition


def _evalrun(status: dict[str, Any] | None, generation: int = 1) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "law-run", "namespace": "team-a", "generation": generation},
        "spec": {
            "models": [{"name": "qwen"}, {"name": "gemma"}],
            "judges": [{"name": "gemma"}, {"name": "gpt"}],
        },
    }
    if status is not None:
        obj["status"] = status
    return obj


def _placements() -> dict[str, Any]:
    gpu = Placement(
        runtime="vllm",
        quantization="awq",
        tensor_parallel_size=2,
        gpu_product="NVIDIA-L4",
        reason="fits 2 L4 at AWQ",
    )
    cpu = Placement(
        runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0, reason="small model on CPU"
    )
    external = {
        "schedulable": True,
        "runtime": "openai",
        "quantization": "",
        "tensorParallelSize": 0,
        "gpuProduct": None,
        "nodeSelector": {},
        "reason": "existing OpenAI-compatible endpoint: nothing to deploy",
    }
    # as an operator before issue 26 wrote them: the prose in ``reason``
    return {"qwen": gpu.to_full_json(), "gemma": cpu.to_full_json(), "gpt": external}


def _judging_status() -> dict[str, Any]:
    now = "2026-11-30T20:00:00Z"
    return {
        "phase": "Judging",
        "observedGeneration": 1,
        "progress": "30/48",
        "startedAt": "2026-11-30T19:50:00Z",
        "stages": {
            "generation": {
                "done": 24,
                "total": 24,
                "jobsDone": 2,
                "jobs": 2,
                "models": {"qwen": {"done": 12, "total": 12}, "gemma": {"done": 12, "total": 12}},
            },
            "judging": {
                "done": 6,
                "total": 24,
                "jobsDone": 0,
                "jobs": 2,
                "judges": {"gemma": {"done": 6, "total": 12}, "gpt": {"done": 0, "total": 12}},
            },
            "aggregation": {"done": 0, "total": 1},
        },
        "placement": _placements(),
        "conditions": [
            condition(
                [], "GenerationComplete", True, "AllAnswersGenerated", "Generation jobs done 2/2", 1, now
            ).to_json(),
            condition(
                [], "JudgingComplete", False, "Judging", "Judge jobs done 0/2, judgments 6/24", 1, now
            ).to_json(),
        ],
    }


def section(text: str, title: str) -> list[str]:
    """The lines of one titled block of the output (up to the next blank line)."""
    return text.split(title + "\n")[1].split("\n\n")[0].splitlines()


def test_a_run_in_progress_shows_phase_stages_placement_and_conditions() -> None:
    text = render(_evalrun(_judging_status()))
    assert text.startswith("EvalRun team-a/law-run   phase: Judging   progress: 30/48")
    assert "generation   24/24  100.0%  2/2" in text
    assert "judging      6/24    25.0%  0/2" in text
    assert "aggregation  0/1      0.0%" in text
    placement = section(text, "Models and judges (placement)")
    qwen = next(line for line in placement if line.strip().startswith("qwen"))
    assert qwen.split()[:6] == ["qwen", "model", "vllm", "awq", "2×", "NVIDIA-L4"]
    gemma = next(line for line in placement if line.strip().startswith("gemma "))
    assert "model+judge" in gemma and "CPU" in gemma
    gpt = next(line for line in placement if line.strip().startswith("gpt "))
    assert "judge" in gpt and "external" in gpt
    assert "JudgingComplete     False   Judging" in text
    assert [row.split() for row in section(text, "Per model and judge")] == [
        ["name", "generation", "judging"],
        ["qwen", "12/12", "—"],
        ["gemma", "12/12", "6/12"],
        ["gpt", "—", "0/12"],
    ]
    assert "Ranking" not in text


def test_a_succeeded_run_shows_the_ranking_with_intervals_and_the_report() -> None:
    status = _judging_status() | {
        "phase": "Succeeded",
        "completedAt": "2026-11-30T20:10:00Z",
        "summary": {
            "primarySeries": "primary",
            "reportUri": "s3://bucket/runs/law-run/report.html",
            "leader": "qwen",
            "ranking": [
                {
                    "rank": 1,
                    "model": "qwen",
                    "weighted": 4.1234,
                    "weightedCI": [3.9, 4.3],
                    "degradation": 0.12,
                    "sigma": 0.4,
                    "tier": "A",
                },
                {
                    "rank": 2,
                    "model": "gemma",
                    "weighted": 3.2,
                    "weightedCI": [None, None],
                    "degradation": None,
                    "sigma": 0.5,
                    "tier": None,
                },
            ],
            "domainLeaders": {"law": "qwen"},
        },
    }
    text = render(_evalrun(status))
    assert "completed 2026-11-30T20:10:00Z" in text
    assert "Ranking (series primary)" in text
    rows = [line.split() for line in text.splitlines() if line.strip().startswith(("1 ", "2 "))]
    assert rows[0] == ["1", "qwen", "4.123", "[3.900,", "4.300]", "0.120", "0.400", "A"]
    assert rows[1] == ["2", "gemma", "3.200", "[—,", "—]", "—", "0.500", "—"]
    assert "domain leaders: law: qwen" in text
    assert "report: s3://bucket/runs/law-run/report.html" in text


def test_a_failed_run_says_why_and_an_unreconciled_run_asks_about_the_operator() -> None:
    failed = {
        "phase": "Failed",
        "conditions": [
            condition(
                [], "Failed", True, "StageFailed", "generate qwen failed: 9 of 12 requests timed out", 1, "t"
            ).to_json()
        ],
    }
    assert "Failed: generate qwen failed: 9 of 12 requests timed out." in render(_evalrun(failed))
    fresh = render(_evalrun(None))
    assert "phase: Pending" in fresh
    assert "not reconciled yet" in fresh and "none reported yet" in fresh and "not placed yet" in fresh


def test_a_status_of_an_older_generation_is_called_stale() -> None:
    assert "status is of generation 1, spec is at 2" in render(_evalrun(_judging_status(), generation=2))


def test_the_record_reads_the_operator_placement_back_and_tolerates_foreign_shapes() -> None:
    record = RunStatus.from_json(_judging_status())
    assert [p.name for p in record.placement] == ["qwen", "gemma", "gpt"]
    assert record.placement[0].gpu_product == "NVIDIA-L4" and record.placement[0].tensor_parallel_size == 2
    assert not record.finished
    odd = RunStatus.from_json(
        {
            "phase": "Succeeded",
            "stages": {"generation": "??", "extra": {"done": "x"}},
            "conditions": ["bad", {"type": "Ready"}],
            "summary": {"ranking": [{"weighted": "n/a"}]},
        }
    )
    assert odd.finished
    assert [s.stage for s in odd.stages] == ["extra"] and odd.stages[0].done == 0
    assert [c.type for c in odd.conditions] == ["Ready"]
    assert odd.summary is not None and odd.summary.ranking[0].weighted is None


def test_the_cli_knows_status_with_namespace_watch_and_kubeconfig() -> None:
    args = build_parser(only="status").parse_args(
        ["status", "law-run", "-n", "team-a", "--watch", "--kubeconfig", "/tmp/kc"]
    )
    assert (args.name, args.namespace, args.watch, args.kubeconfig) == ("law-run", "team-a", True, "/tmp/kc")


def test_gpu_time_per_server_is_shown_with_the_idle_share_of_a_finished_run() -> None:
    status = _judging_status()
    status.update(
        phase="Succeeded",
        completedAt="2026-11-30T21:00:00Z",
        gpu={
            "servers": {
                "qwen": {"role": "model", "gpus": 2, "heldGpuSeconds": 7200, "usedGpuSeconds": 6480},
                "gemma": {"role": "model+judge", "gpus": 0, "heldGpuSeconds": 0, "usedGpuSeconds": 0},
            }
        },
    )
    text = render(_evalrun(status))
    rows = [
        line.split()
        for line in section(text, "GPU time (held = Ready × GPUs; used = its Jobs running × GPUs)")
    ]
    assert rows[1] == ["qwen", "model", "2", "2.000", "1.800", "down"]
    assert "held idle so far: 10.0%" in text
    assert RunStatus.from_json({"gpu": {"servers": ["broken"]}}).gpu.servers == ()


def test_a_placement_of_a_runtime_this_version_does_not_know_is_shown_as_a_server_the_operator_runs() -> None:
    from kubejury.commands.status import _where

    assert _where(Placement(runtime="some-future-runtime", quantization="", tensor_parallel_size=0)) == "CPU"
    assert _where(Placement(runtime="openai", quantization="", tensor_parallel_size=0)) == "external"
    assert _where(Placement(runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0)) == "CPU"


def test_a_run_that_reused_earlier_runs_shows_what_it_copied_and_from_which_run() -> None:
    reuse = {
        "sources": ["board"],
        "copied": True,
        "models": {"qwen": {"reused": 24, "fromRuns": {"board": 24}}, "gemma": {"reused": 0, "fromRuns": {}}},
        "judges": {"gpt": {"reused": 24, "fromRuns": {"board": 24}}},
        "refused": ["model gemma: quantization changed (q4_k_m → q8_0)"],
    }
    text = render(_evalrun({**_judging_status(), "reuse": reuse}))
    rows = [row.split() for row in section(text, "Reused from board")]
    assert rows[0] == ["name", "role", "copied", "from"]
    assert ["qwen", "model", "24", "24", "from", "board"] in rows
    assert ["gemma", "model", "0", "—"] in rows
    assert rows[-1][:3] == ["refused:", "model", "gemma:"]
    waiting = render(_evalrun({**_judging_status(), "reuse": {"sources": ["board"], "copied": False}}))
    assert section(waiting, "Reused from board") == ["  not copied yet: the reuse Job runs first"]
    assert "Reused from" not in render(_evalrun(_judging_status()))


def test_a_queued_run_shows_its_kueue_queues_and_how_long_it_waited() -> None:
    queue = {
        "localQueue": "gpu-queue",
        "clusterQueue": "h100",
        "waitingSince": "2026-12-03T10:00:00Z",
        "waitedSeconds": 30.0,
    }
    status = {**_judging_status(), "queue": queue, "completedAt": "2026-12-03T10:01:00Z"}
    assert section(render(_evalrun(status)), "Kueue: LocalQueue gpu-queue → ClusterQueue h100") == [
        "  waited for quota 90 s, waiting since 2026-12-03T10:00:00Z"
    ]
    assert "Kueue:" not in render(_evalrun(_judging_status()))


def test_the_why_column_shows_the_placement_prose_from_its_event() -> None:
    qwen = Placement(
        name="qwen", runtime="vllm", quantization="awq", tensor_parallel_size=2, gpu_product="NVIDIA-L4"
    )
    status = {**_judging_status(), "placement": {"qwen": qwen.to_json()}}
    notes = placement_notes(
        placement_event_messages([replace(qwen, reason="AWQ checkpoint; TP 2 on 4 × L4")])
    )
    row = section(render(_evalrun(status), notes), "Models and judges (placement)")[1]
    assert row.endswith("AWQ checkpoint; TP 2 on 4 × L4")


def test_without_an_event_the_why_column_says_what_the_code_means_and_the_memory_needed() -> None:
    unfit = Placement(
        name="qwen",
        runtime="vllm",
        quantization="bf16",
        tensor_parallel_size=0,
        schedulable=False,
        memory_gib=88.2,
    )
    status = {**_judging_status(), "placement": {"qwen": unfit.to_json()}}
    row = section(render(_evalrun(status)), "Models and judges (placement)")[1]
    assert "NO" in row.split() and row.endswith("no node can run it; needs about 88 GiB")


def test_a_status_written_with_prose_before_the_events_still_shows_it() -> None:
    row = section(render(_evalrun(_judging_status())), "Models and judges (placement)")[1]
    assert row.endswith("fits 2 L4 at AWQ")


def test_a_run_with_compared_pairs_shows_each_verdict_under_the_ranking() -> None:
    status = _judging_status() | {
        "phase": "Succeeded",
        "summary": {
            "primarySeries": "primary",
            "ranking": [{"rank": 1, "model": "qwen", "weighted": 8.1}],
            "comparisons": [
                {
                    "a": "qwen",
                    "b": "gemma",
                    "margin": 0.25,
                    "difference": 0.041,
                    "ci90": [-0.06, 0.14],
                    "verdict": "equivalent",
                    "questionsNeeded": 120,
                },
            ],
        },
    }
    text = render(_evalrun(status))
    assert "equivalence (ΔW = W(a) − W(b) with its 90% interval; TOST at α = 5%):" in text
    assert "qwen − gemma: +0.041 [-0.060, 0.140] within ±0.25: equivalent" in text


def test_a_budgeted_run_shows_each_models_questions_and_why_it_stopped() -> None:
    budget = {
        "goal": "leading-group",
        "looksDone": 2,
        "looks": 3,
        "models": {
            "qwen": {"status": "continue", "questions": 24, "look": 2, "reason": ""},
            "tiny": {"status": "stopped", "questions": 12, "look": 1, "reason": "out: below qwen"},
        },
    }
    text = render(_evalrun({**_judging_status(), "budget": budget}))
    rows = [row.split() for row in section(text, "Sequential budget (leading-group), looks done 2/3")]
    assert rows[0] == ["model", "status", "questions", "look", "why"]
    assert ["tiny", "stopped", "12", "1", "out:", "below", "qwen"] in rows
    assert ["qwen", "continue", "24", "2", "—"] in rows
    assert "Sequential budget" not in render(_evalrun(_judging_status()))
