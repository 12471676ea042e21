"""The pure parts of the operator scale benchmark (``benchmarks/operator_scale``): the node mix,
audit-log requests per window and verb, percentiles, status delays, server-creation times, the
fast kubelet's reading of a Job pod, and the results Markdown. No cluster here: the benchmark
itself runs with ``make bench-operator``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks.operator_scale import fast_kubelet, measure, nodemix, report, workload  # noqa: E402

from devcluster.nodes import load_nodes  # noqa: E402
from kubejury.placement.gpu_nodes import gpu_pools, parse_node_list  # noqa: E402

OPERATOR = measure.OPERATOR_USER


def audit_line(
    verb: str,
    resource: str,
    at: str,
    *,
    user: str = OPERATOR,
    stage: str = "ResponseComplete",
    code: int = 200,
    namespace: str = "ns",
    name: str = "",
    subresource: str = "",
) -> bytes:
    ref: dict[str, Any] = {"resource": resource, "namespace": namespace}
    if name:
        ref["name"] = name
    if subresource:
        ref["subresource"] = subresource
    event = {
        "kind": "Event",
        "stage": stage,
        "verb": verb,
        "user": {"username": user},
        "objectRef": ref,
        "responseStatus": {"code": code},
        "requestReceivedTimestamp": at,
        "stageTimestamp": at,
    }
    return json.dumps(event).encode()


# ------------------------------------------------------------------------------------ node mix


def test_the_500_node_mix_has_seven_gpu_products_and_cpu_nodes_with_gfd_labels_and_taints() -> None:
    nodes = nodemix.node_list(500)
    assert len(nodes["items"]) == 500
    products = nodemix.gpus_by_product(nodes)
    assert set(products) == {
        "NVIDIA-H100-80GB-HBM3",
        "NVIDIA-H200",
        "NVIDIA-B200",
        "NVIDIA-A100-SXM4-80GB",
        "NVIDIA-A100-SXM4-40GB",
        "NVIDIA-L40S",
        "NVIDIA-L4",
    }
    gpu_node = next(n for n in nodes["items"] if n["metadata"]["name"] == "gpu-h200-0")
    labels = gpu_node["metadata"]["labels"]
    assert labels["nvidia.com/gpu.memory"] == "143771" and labels["nvidia.com/gpu.compute.major"] == "9"
    assert gpu_node["spec"]["taints"] == [
        {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    ]
    assert gpu_node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    cpu_nodes = [n for n in nodes["items"] if "nvidia.com/gpu.present" not in n["metadata"]["labels"]]
    assert cpu_nodes and all(not n["spec"].get("taints") for n in cpu_nodes)
    # placement reads every pool, with its compute capability
    pools = gpu_pools(parse_node_list(nodes["items"]))
    assert len(pools) == 7 and all(p.compute_capability is not None for p in pools)


@pytest.mark.parametrize("total", [1, 7, 8, 50, 123, 500, 1000])
def test_any_node_count_is_met_exactly_and_small_mixes_keep_every_pool(total: int) -> None:
    counts = nodemix.counts(total)
    assert sum(counts.values()) == total
    if total >= len(nodemix.NODE_TYPES):
        assert all(v >= 1 for v in counts.values())
    assert nodemix.counts(500) == {t.prefix: t.share for t in nodemix.NODE_TYPES}


def test_the_mix_is_a_nodes_file_the_dev_cluster_accepts(tmp_path: Path) -> None:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps(nodemix.node_list(50)))
    assert len(load_nodes(path)) == 50


# ----------------------------------------------------------------------------------- audit log


def test_requests_are_counted_once_per_window_and_verb_for_the_operator_and_everyone() -> None:
    lines = [
        audit_line("list", "jobs", "2026-12-01T00:00:10.000000Z"),
        audit_line("list", "jobs", "2026-12-01T00:00:20.000000Z"),
        audit_line("patch", "evalruns", "2026-12-01T00:00:30.000000Z", subresource="status"),
        # a watch counts when it starts, not again when it ends
        audit_line("watch", "pods", "2026-12-01T00:00:40.000000Z", stage="ResponseStarted"),
        audit_line("watch", "pods", "2026-12-01T00:00:40.000000Z"),
        # a normal request counts at ResponseComplete only
        audit_line("get", "secrets", "2026-12-01T00:00:50.000000Z", stage="ResponseStarted"),
        audit_line("update", "leases", "2026-12-01T00:00:50.000000Z", user="system:node:gpu-h100-0"),
        audit_line("get", "secrets", "2026-12-01T00:01:30.000000Z"),  # the idle window
        b'{"torn line',
    ]
    start = measure.parse_time("2026-12-01T00:00:00Z")
    windows = [
        measure.Window("active", start, start + 60),
        measure.Window("idle", start + 60, start + 180),
    ]
    tally = measure.AuditTally(windows)
    tally.add_lines(lines)
    active, idle = tally.load("active"), tally.load("idle")
    assert active.operator_by_verb == {"list": 2.0, "patch": 1.0, "watch": 1.0}
    assert active.operator_by_verb_resource["patch evalruns/status"] == 1.0
    assert active.all_by_verb == {"list": 2.0, "patch": 1.0, "watch": 1.0, "update": 1.0}
    assert active.by_user["system:node:gpu-h100-0"] == 1.0
    assert idle.operator_by_verb == {"get": 0.5}  # one request in two minutes
    assert idle.all_total == 0.5
    assert measure.window_load(measure.requests_from_lines(lines), windows[0]).operator_total == 4.0


def test_refusals_and_deployment_creations_are_read_from_the_operators_requests() -> None:
    lines = [
        audit_line("create", "deployments", "2026-12-01T00:00:01.500000Z", name="kj-w010-001-m-a", code=201),
        audit_line("create", "deployments", "2026-12-01T00:00:03.000000Z", name="kj-w010-001-m-b", code=201),
        audit_line("create", "deployments", "2026-12-01T00:00:04.000000Z", name="kj-w010-001-m-b", code=409),
        audit_line("create", "deployments", "2026-12-01T00:00:05.000000Z", name="kj-w010-0011-m-a", code=201),
        audit_line("create", "deployments", "2026-12-01T00:00:09.000000Z", name="kj-w010-001-m-c", code=201),
        audit_line("list", "secrets", "2026-12-01T00:00:06.000000Z", code=403),
    ]
    requests = list(measure.requests_from_lines(lines))
    assert measure.forbidden(requests) == 1
    created = measure.deployment_creations(requests, [("ns", "w010-001")])
    assert created == {
        ("ns", "w010-001"): {
            "kj-w010-001-m-a": measure.parse_time("2026-12-01T00:00:01.5Z"),
            "kj-w010-001-m-b": measure.parse_time("2026-12-01T00:00:03Z"),
            "kj-w010-001-m-c": measure.parse_time("2026-12-01T00:00:09Z"),
        }
    }
    at = measure.parse_time("2026-12-01T00:00:00Z")
    first_wave = ["kj-w010-001-m-a", "kj-w010-001-m-b"]
    assert measure.time_to_create(at, created[("ns", "w010-001")], first_wave) == pytest.approx(3.0)
    assert measure.time_to_create(at, created[("ns", "w010-001")], ["kj-w010-001-m-z"]) is None


def test_refused_requests_and_writes_repeated_on_one_object_are_counted() -> None:
    lines = [
        audit_line("patch", "deployments", "2026-12-01T00:00:01Z", name="kj-r-m-a"),
        audit_line("patch", "deployments", "2026-12-01T00:00:02Z", name="kj-r-m-a"),
        audit_line("patch", "deployments", "2026-12-01T00:00:03Z", name="kj-r-m-a"),
        audit_line("patch", "deployments", "2026-12-01T00:00:04Z", name="kj-r-m-b"),
        audit_line("patch", "deployments", "2026-12-01T00:00:05Z", name="kj-r-m-c", namespace="other"),
        audit_line("create", "jobs", "2026-12-01T00:00:06Z", name="kj-r-gen-a", code=409),
        audit_line("patch", "deployments", "2026-12-01T00:02:00Z", name="kj-r-m-a"),  # outside
    ]
    start = measure.parse_time("2026-12-01T00:00:00Z")
    window = measure.Window("active", start, start + 60)
    requests = list(measure.requests_from_lines(lines))
    assert measure.repeated_writes(requests, window, "patch", "deployments") == {
        "requests": 5,
        "objects": 3,
        "max_per_object": 3,
        "mean_per_object": 1.67,
    }
    assert measure.window_load(requests, window).operator_refused == {"create jobs 409": 1}


# --------------------------------------------------------------------------------- arithmetic


def test_percentiles_interpolate_between_ranks() -> None:
    assert measure.percentile([], 50) is None
    assert measure.percentile([4.0], 99) == 4.0
    assert measure.percentile([1.0, 2.0, 3.0, 4.0], 50) == 2.5
    assert measure.percentile(list(map(float, range(101))), 99) == pytest.approx(99.0)
    assert measure.percentile([3.0, 1.0, 2.0], 100) == 3.0
    with pytest.raises(ValueError):
        measure.percentile([1.0], 101)
    assert measure.distribution([1.0, 3.0]) == {
        "count": 2,
        "p50": 2.0,
        "p99": pytest.approx(2.98),
        "max": 3.0,
    }


def test_the_busiest_stretch_of_a_cumulative_counter() -> None:
    samples = [(0.0, 0.0), (5.0, 0.5), (10.0, 1.0), (15.0, 4.0), (20.0, 7.0), (25.0, 7.5)]
    assert measure.peak_rate(samples, 10.0) == pytest.approx(0.6)  # 10 → 20 s: 6 CPU-seconds in 10 s
    assert measure.peak_rate(samples[:2], 10.0) is None
    assert measure.ratio(2.0, 4.0) == 0.5 and measure.ratio(1.0, 0.0) is None


def test_status_delays_count_the_kth_completion_against_the_kth_jobs_done() -> None:
    jobs = [
        measure.JobDone("generate", 10.0),
        measure.JobDone("generate", 12.0),
        measure.JobDone("judge", 20.0, final=False),  # an earlier round: no status field shows it
        measure.JobDone("judge", 30.0),
        measure.JobDone("aggregate", 40.0),
    ]
    points = [
        measure.StatusPoint(9.5, "Generating", 1, 0, False),  # from the progress record, before Complete
        measure.StatusPoint(25.0, "Judging", 2, 0, False),
        measure.StatusPoint(33.0, "Aggregating", 2, 1, False),
        measure.StatusPoint(41.5, "Succeeded", 2, 1, False),  # no summary yet
        measure.StatusPoint(44.0, "Succeeded", 2, 1, True),
    ]
    delays, missing = measure.status_delays(jobs, points)
    assert missing == 0
    assert [(d.kind, d.seconds, d.early) for d in delays] == [
        ("generate", 0.0, True),
        ("generate", 13.0, False),
        ("judge", 3.0, False),
        ("aggregate", 4.0, False),
    ]
    never, missing = measure.status_delays([measure.JobDone("generate", 1.0)], [])
    assert never == [] and missing == 1


def test_status_points_read_the_stage_counters() -> None:
    status = {
        "phase": "Judging",
        "stages": {"generation": {"jobsDone": 32, "jobs": 32}, "judging": {"jobsDone": 4, "jobs": 6}},
    }
    assert measure.status_point(1.0, status) == measure.StatusPoint(1.0, "Judging", 32, 4, False)
    assert measure.status_point(2.0, {}) == measure.StatusPoint(2.0, "", 0, 0, False)


def test_each_status_change_is_counted_once_per_run_under_every_cause_it_carries() -> None:
    tally = measure.WriteTally()
    run = ("bench-00", "w010-001")
    first = {
        "phase": "Generating",
        "conditions": [{"type": "Ready", "status": "False", "reason": "Generating", "message": "1 of 9"}],
        "stages": {"generation": {"jobsDone": 1, "done": 10}},
        "gpu": {"servers": {"qwen": {"readySince": None}}},
    }
    tally.add(run, first)  # the first version seen is no write of the operator's
    second = {**first, "stages": {"generation": {"jobsDone": 2, "done": 10}}}
    tally.add(run, second)
    tally.add(run, dict(second))  # unchanged: a write of the spec or metadata
    ready = {"servers": {"qwen": {"readySince": "2026-12-03T19:00:00Z"}}}
    message = [{"type": "Ready", "status": "False", "reason": "Generating", "message": "2 of 9"}]
    third = {**second, "gpu": ready, "conditions": message}
    tally.add(run, third)
    figures = tally.to_json()
    assert figures["runs"] == 1 and figures["writes_per_run"] == 2
    assert figures["counters_only_per_run"] == 0  # a Job done, then a server Ready: decisions both
    assert figures["cause_per_run"] == {
        "stages.*.jobsDone": 1,
        "gpu.servers.*.readySince": 1,
        "conditions (message only)": 1,
    }
    assert figures["only_cause_per_run"] == {"stages.*.jobsDone": 1}
    assert measure.write_causes({"phase": "A"}, {"phase": "B", "summary": {"w": 1}}) == {"phase", "summary"}
    counters = {**third, "stages": {"generation": {"jobsDone": 2, "done": 20}}, "progress": "20/90"}
    tally.add(run, counters)
    assert tally.to_json()["counters_only_per_run"] == 1


# -------------------------------------------------------------------------------- fast kubelet


def job_pod(args: list[str], annotations: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "bench-00", "annotations": annotations or {}},
        "spec": {
            "containers": [{"name": "stage", "args": args}],
            "volumes": [
                {"name": "spec", "configMap": {"name": "kj-w010-001-spec"}},
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    }


def test_the_fast_kubelet_reads_stage_series_name_and_shard_from_the_pods_args() -> None:
    pod = job_pod(
        [
            *(
                "generate",
                "--evalrun",
                "/etc/kubejury/evalrun.yaml",
                "--series",
                "primary",
                "--model",
                "phi-4",
            ),
            *("--endpoint", "http://x:8000/v1", "--shards", "4", "--shard-index", "$(JOB_COMPLETION_INDEX)"),
        ],
        {fast_kubelet.COMPLETION_INDEX: "2"},
    )
    assert fast_kubelet.stage_work(pod) == fast_kubelet.StageWork("generate", "primary", "phi-4", (2, 4))
    judge = job_pod(["judge", "--evalrun", "/e", "--series", "s", "--judge", "j", "--endpoint", "u"])
    assert fast_kubelet.stage_work(judge) == fast_kubelet.StageWork("judge", "s", "j", None)
    assert fast_kubelet.stage_work(job_pod(["aggregate", "--evalrun", "/e"])).stage == "aggregate"
    assert fast_kubelet.spec_configmap(pod) == "kj-w010-001-spec"
    with pytest.raises(ValueError):
        fast_kubelet.stage_work(job_pod(["sh", "-c", "true"]))


def test_the_run_storage_uri_inside_the_pod_maps_to_the_claims_host_directory(tmp_path: Path) -> None:
    uri = "file:///var/lib/kubejury/results/bench-00/w010-001-1a2b3c4d"
    assert fast_kubelet.host_root(uri, tmp_path) == tmp_path / "bench-00" / "w010-001-1a2b3c4d"
    with pytest.raises(ValueError):
        fast_kubelet.host_root("file:///elsewhere/x", tmp_path)
    assert fast_kubelet.hold_range("5") == (5.0, 5.0) and fast_kubelet.hold_range("2-20") == (2.0, 20.0)


def test_the_fast_kubelet_leaves_the_records_the_operator_reads(tmp_path: Path) -> None:
    from kubejury_operator.observed import collect_progress, progress_key

    target = fast_kubelet.RunStorage("w010-001", tmp_path)
    for shard in range(2):
        work = fast_kubelet.StageWork("generate", "primary", "phi-4", (shard, 2))
        fast_kubelet.write_stage_records(target, work, finished=False)
        fast_kubelet.write_stage_records(target, work, finished=True)
    fast_kubelet.write_stage_records(target, fast_kubelet.StageWork("judge", "primary", "j"), finished=True)
    report_doc = b'{"schema_version": 1}'
    fast_kubelet.write_stage_records(
        target, fast_kubelet.StageWork("aggregate"), finished=True, report=report_doc
    )
    folder = tmp_path / "w010-001" / "primary" / "progress"
    entries = [
        ("primary", f"w010-001/primary/progress/{p.name}", json.loads(p.read_text()))
        for p in folder.iterdir()
    ]
    assert all(progress_key("primary", key) is not None for _, key, _ in entries)
    progress = collect_progress(entries)
    generation = progress[("generate", "primary", "phi-4")]
    assert generation.complete and generation.done == generation.total == fast_kubelet.QUESTIONS
    judging = progress[("judge", "primary", "j")]
    assert judging.complete and judging.total == fast_kubelet.QUESTIONS  # every answer stored so far
    # a later round starts from what the earlier ones judged, as the engine's stage resumes
    more = fast_kubelet.StageWork("generate", "primary", "qwen")
    fast_kubelet.write_stage_records(target, more, finished=True)
    fast_kubelet.write_stage_records(target, fast_kubelet.StageWork("judge", "primary", "j"), finished=False)
    second = json.loads((folder / "judge-j.json").read_text())
    assert (second["state"], second["total"]) == ("running", 2 * fast_kubelet.QUESTIONS)
    assert second["done"] == second["resumed"] == fast_kubelet.QUESTIONS
    assert (tmp_path / "w010-001" / "report" / "report.json").read_bytes() == report_doc
    aggregate = json.loads((tmp_path / "w010-001" / "progress" / "aggregate-report.json").read_text())
    assert aggregate["state"] == "succeeded"


def test_pod_statuses_look_like_a_kubelets() -> None:
    pod = job_pod(["aggregate"])
    running = fast_kubelet.running_status(pod, "2026-12-01T00:00:00Z")
    assert running["phase"] == "Running" and running["containerStatuses"][0]["state"]["running"]
    done = fast_kubelet.succeeded_status(pod, "2026-12-01T00:00:00Z", "2026-12-01T00:00:05Z")
    assert done["phase"] == "Succeeded"
    assert done["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 0


# ---------------------------------------------------------------------------------- workload


def test_runs_spread_over_namespaces_and_no_name_is_a_prefix_of_another() -> None:
    names = workload.run_names(30, 10)
    assert len({n.namespace for n in names}) == 10
    plain = [n.name for n in names]
    assert not any(a != b and b.startswith(a + "-") for a in plain for b in plain)
    body = workload.evalrun(names[0], 0, "w030")
    assert (
        len(body["spec"]["series"]) == 2 and len(workload.evalrun(names[1], 1, "w030")["spec"]["series"]) == 1
    )
    assert len(body["spec"]["models"]) == 16 and len(body["spec"]["judges"]) == 3
    assert body["spec"]["storage"] == {
        "uri": workload.RESULTS_URI,
        "persistentVolumeClaim": "kubejury-results",
    }
    assert "modelCache" not in body["spec"] and body["metadata"]["labels"] == {workload.BENCH_LABEL: "w030"}


# ------------------------------------------------------------------------------------ report


def round_result(design: str, runs: int, idle_per_run: float, p99: float) -> dict[str, Any]:
    return {
        "design": design,
        "runs": runs,
        "all_finished": True,
        "outcome": {"succeeded": runs, "unfinished": 0},
        "operator": {"cores_active": 0.2, "peak_cores_active_30s": 0.4, "peak_rss_mib": 200.0},
        "api": {
            "operator_per_finished_run_per_min_idle": idle_per_run,
            "active": {
                "operator_per_min": 100.0,
                "operator_by_verb_per_min": {"list": 80.0} if design == "list" else {},
            },
            "idle": {"operator_per_min": idle_per_run * runs, "operator_by_verb_per_min": {}},
        },
        "status_delay_s": {"all": {"p50": p99 / 2, "p99": p99, "max": p99, "count": 10}},
    }


def test_the_markdown_shows_both_designs_with_ratios_and_the_targets() -> None:
    document = {
        "meta": {"command": "make bench-operator", "cores": 2, "options": {"nodes": 500}},
        "rounds": [
            round_result("list", 10, 32.0, 14.0),
            round_result("watch", 10, 0.0, 1.0),
            round_result("list", 100, 32.0, 15.0),
            round_result("watch", 100, 0.0, 2.0),
        ],
    }
    text = report.render(document)
    assert "### 10 runs" in text and "### 100 runs" in text
    assert "## Targets (issue 13), at 100 runs" in text
    assert "| p99 status delay ≤ 5 s | 15.000 s: **not met** | 2.000 s: **met** |" in text
    assert "| status delay p99 (s) | 15.00 | 2.00 | ×0.13 |" in text
    assert "| operator `list` requests/min, active | 80.0 | 0.0 | ×0.00 |" in text
    assert "`make bench-operator`" in text
    assert "## Notes" not in text
    document["notes"] = ["another CI run shared the machine during the watch round at 100 runs"]
    assert "- another CI run shared the machine during the watch round at 100 runs" in report.render(document)


def test_a_round_cut_short_by_its_timeout_gives_no_idle_figure_and_the_target_says_where_it_was_met() -> None:
    cut_short = round_result("watch", 100, 0.5, 3.0)
    cut_short["all_finished"] = False
    cut_short["outcome"] = {"succeeded": 60, "unfinished": 40}
    document = {
        "meta": {},
        "rounds": [
            round_result("list", 30, 32.0, 14.0),
            round_result("watch", 30, 0.0, 1.0),
            round_result("list", 100, 32.0, 15.0),
            cut_short,
        ],
    }
    text = report.render(document)
    assert "| … per finished run, idle | 32.000 | n/a† | — |" in text
    assert "0.000 req/min per run: **met** (at 30 runs)" in text
    assert "3.000 s: **met** (until the timeout; 40 runs unfinished)" in text
    assert "Not every run finished" in text and report.FOOTNOTE in text


RECORDED = REPO / "benchmarks" / "results" / "operator_scale.json"


def test_the_list_design_is_the_recorded_baseline_of_the_results_file() -> None:
    """Issue 22 removed the list-per-tick design: its rounds come from the recorded results."""
    recorded = report.baseline(RECORDED)
    assert recorded is not None
    assert sorted(r["runs"] for r in recorded["rounds"]) == [10, 30, 100]
    assert {r["design"] for r in recorded["rounds"]} == {"list"}
    data = json.loads(RECORDED.read_text(encoding="utf-8"))
    if "baseline" in data:  # a newer run's file (issue 26's lean/full rounds) carries it on unchanged
        assert recorded == data["baseline"]
        assert recorded["started"] < data["meta"]["started"]
    else:
        assert (
            recorded["started"] == data["meta"]["started"] and recorded["command"] == data["meta"]["command"]
        )


def test_a_baseline_carried_by_a_newer_results_file_is_carried_on_unchanged(tmp_path: Path) -> None:
    carried = {"rounds": [round_result("list", 10, 32.0, 14.0)], "started": "2026-12-01T12:00:00+00:00"}
    newer = tmp_path / "operator_scale.json"
    newer.write_text(json.dumps({"rounds": [round_result("watch", 10, 0.0, 1.0)], "baseline": carried}))
    assert report.baseline(newer) == carried
    assert report.baseline(tmp_path / "missing.json") is None
    only_watch = tmp_path / "watch.json"
    only_watch.write_text(json.dumps({"rounds": [round_result("watch", 10, 0.0, 1.0)]}))
    assert report.baseline(only_watch) is None


def test_the_markdown_shows_the_recorded_list_figures_beside_the_watch_rounds_measured() -> None:
    watch = round_result("watch", 10, 0.0, 1.0)
    watch["source"] = {"digest": "new", "git_head": "b"}
    old = round_result("list", 10, 32.0, 14.0)
    old["source"] = {"digest": "old", "git_head": "a"}
    baseline = {
        "rounds": [old],
        "started": "2026-12-01T12:00:00+00:00",
        "command": "make bench-operator",
        "git_head": ["a"],
    }
    text = report.render({"meta": {}, "rounds": [watch], "baseline": baseline})
    assert "| status delay p99 (s) | 14.00 | 1.00 | ×0.07 |" in text
    assert "recorded baseline, measured 2026-12-01T12:00:00+00:00 UTC by `make bench-operator`" in text
    assert "Both designs of the operator ran in one" not in text
    assert "every round ran the same operator and engine source (digest new)" in text


def test_the_benchmark_runs_each_design_with_its_status_format_and_the_source_copy() -> None:
    from benchmarks.operator_scale import __main__ as entry
    from benchmarks.operator_scale import bench

    assert bench.source_values(Path("/src"), "full") == {
        "operator.extraEnv[0].name": "KUBEJURY_STATUS_FORMAT",
        "operator.extraEnv[0].value": "full",
        "operator.extraEnv[1].name": "PYTHONPATH",
        "operator.extraEnv[1].value": "/src",
    }
    assert bench.source_values()["operator.extraEnv[0].value"] == "lean"
    options, args = entry.parse(["--runs", "3", "--state", str(Path.home() / "bench-state")])
    assert options.scales == (3,) and args.baseline == RECORDED
    assert options.designs == ("lean", "full")  # after, then before, in one invocation
    assert entry.parse(["--designs", "full"])[0].designs == ("full",)
    with pytest.raises(SystemExit):
        entry.parse(["--designs", "list,watch"])


def test_status_delays_on_the_api_servers_clock_leave_the_benchmarks_watch_lag_out() -> None:
    """The watches saw the Job at 10 and the status at 30 (20 s); the API server completed the Job
    at 100 and recorded the status write at 102: 2 s on its clock."""
    jobs = [measure.JobDone("generate", 10.0, completed=100.0), measure.JobDone("generate", 11.0)]
    points = [measure.StatusPoint(30.0, "Generating", 1, 0, False, written=102.0)]
    watch, _ = measure.status_delays(jobs[:1], points)
    server, missing = measure.status_delays(jobs, points, server_clock=True)
    assert [d.seconds for d in watch] == [20.0]
    assert [d.seconds for d in server] == [2.0] and missing == 1  # the second Job has no timestamp
    meta = {
        "managedFields": [
            {"manager": "kubectl", "time": "2026-12-01T10:00:00Z"},
            {"manager": "kubejury", "subresource": "status", "time": "2026-12-01T10:00:07Z"},
        ]
    }
    assert measure.status_written(meta) == measure.parse_time("2026-12-01T10:00:07Z")
    assert measure.status_written({}) is None
    done = {
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-01T10:00:05Z"}]
    }
    assert measure.completed_at(done) == measure.parse_time("2026-12-01T10:00:05Z")
    assert measure.completed_at({"conditions": [{"type": "Complete", "status": "False"}]}) is None


def test_the_operators_histograms_give_count_mean_and_bucket_bound_percentiles() -> None:
    text = "\n".join(
        [
            "# HELP kubejury_api_queue_seconds waited",
            "# TYPE kubejury_api_queue_seconds histogram",
            'kubejury_api_queue_seconds_bucket{lane="work",le="0.1"} 90.0',
            'kubejury_api_queue_seconds_bucket{lane="work",le="1.0"} 99.0',
            'kubejury_api_queue_seconds_bucket{lane="work",le="10.0"} 100.0',
            'kubejury_api_queue_seconds_bucket{lane="work",le="+Inf"} 100.0',
            'kubejury_api_queue_seconds_count{lane="work"} 100.0',
            'kubejury_api_queue_seconds_sum{lane="work"} 25.0',
            "# HELP kubejury_items_judged_total judged",
            "# TYPE kubejury_items_judged_total counter",
            'kubejury_items_judged_total{namespace="n",name="r"} 3.0',
        ]
    )
    found = measure.operator_histograms(text + "\n")
    assert found == {
        "kubejury_api_queue_seconds": {"work": {"count": 100.0, "mean": 0.25, "p50": 0.1, "p99": 1.0}}
    }


def apiserver_text(patch_seconds: float, patches: int, watch_seconds: float) -> str:
    return "\n".join(
        [
            "# HELP apiserver_request_duration_seconds latency",
            "# TYPE apiserver_request_duration_seconds histogram",
            'apiserver_request_duration_seconds_bucket{verb="PATCH",resource="evalruns",subresource="status",le="+Inf"} '
            f"{patches}",
            f'apiserver_request_duration_seconds_sum{{verb="PATCH",resource="evalruns",subresource="status"}} {patch_seconds}',
            f'apiserver_request_duration_seconds_count{{verb="PATCH",resource="evalruns",subresource="status"}} {patches}',
            f'apiserver_request_duration_seconds_sum{{verb="WATCH",resource="pods",subresource=""}} {watch_seconds}',
            'apiserver_request_duration_seconds_count{verb="WATCH",resource="pods",subresource=""} 3',
            "",
        ]
    )


def test_the_api_servers_time_per_request_is_taken_over_the_window_and_leaves_watches_out() -> None:
    rows = measure.apiserver_request_seconds(apiserver_text(10.0, 20, 5.0), apiserver_text(70.0, 60, 900.0))
    assert rows == [
        {"verb": "PATCH", "resource": "evalruns/status", "requests": 40, "seconds": 60.0, "mean_s": 1.5}
    ]
    assert measure.apiserver_request_seconds("", "") == []
    lines = report.apiserver_time([{"design": "lean", "runs": 100, "apiserver_request_seconds": rows}])
    assert "| PATCH | evalruns/status | 40 | 1.500 | 60 |" in lines
