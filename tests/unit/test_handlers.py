"""The kopf handlers' pure parts: admission wiring, placement adapter, pinned placement.

``kubejury_operator.handlers`` is imported inside the tests, not at collection: importing it
registers kopf handlers with the reconcile interval read from the environment, which the e2e
conftest shortens; collection of the whole suite must not fix it first.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import kopf
import pytest

from kubejury.config.spec import parse_evalrun

REPO = Path(__file__).resolve().parents[2]


def body(**spec_overrides: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "benchmark": {"uri": "s3://b/bench.jsonl"},
        "models": [{"name": "qwen", "source": "hf://Qwen/Qwen3.5-27B", "parameters": "27B"}],
        "judges": [{"name": "judge", "source": "hf://google/gemma-4-31b", "parameters": "31B"}],
    }
    spec.update(spec_overrides)
    return {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {"name": "r", "namespace": "evals"},
        "spec": spec,
    }


async def test_admission_accepts_a_valid_run() -> None:
    from kubejury_operator import handlers

    await handlers.validate(body=body(), memo=SimpleNamespace())  # type: ignore[arg-type]


async def test_admission_rejects_with_the_field_named() -> None:
    from kubejury_operator import handlers

    bad = body(judges=[])
    with pytest.raises(kopf.AdmissionError) as caught:
        await handlers.validate(body=bad, memo=SimpleNamespace())  # type: ignore[arg-type]
    assert "spec.judges" in str(caught.value)


def test_placements_from_the_nodes_kubectl_returns() -> None:
    from kubejury_operator import handlers

    nodes = json.loads((REPO / "examples" / "nodes" / "h100-cluster.json").read_text())["items"]
    decisions = handlers.compute_placements(parse_evalrun(body()), nodes)
    assert set(decisions) == {"qwen", "judge"}
    assert decisions["qwen"].schedulable
    assert decisions["qwen"].quantization == "fp8"
    assert decisions["qwen"].node_selector["nvidia.com/gpu.product"] == "NVIDIA-H100-80GB-HBM3"


def test_pinned_placement_only_after_pending() -> None:
    from kubejury_operator import handlers

    evalrun = parse_evalrun(body())
    recorded = {
        name: {"schedulable": True, "runtime": "vllm", "quantization": "bf16", "tensorParallelSize": 2}
        for name in ("qwen", "judge")
    }
    assert handlers._pinned({"phase": "Pending", "placement": recorded}, evalrun) is None
    pinned = handlers._pinned({"phase": "Generating", "placement": recorded}, evalrun)
    assert pinned is not None and pinned["qwen"].tensor_parallel_size == 2
    assert handlers._pinned({"phase": "Generating", "placement": {"qwen": recorded["qwen"]}}, evalrun) is None


def test_webhook_server_only_when_a_port_is_set() -> None:
    from kubejury_operator import handlers

    settings = kopf.OperatorSettings()
    handlers.configure_admission(settings, {})
    assert settings.admission.server is None
    handlers.configure_admission(
        settings, {"KUBEJURY_WEBHOOK_PORT": "9443", "KUBEJURY_WEBHOOK_MANAGED": "kj"}
    )
    assert isinstance(settings.admission.server, kopf.WebhookServer)
    assert settings.admission.server.port == 9443
    assert settings.admission.managed == "kj"


def test_run_observation_for_metrics() -> None:
    from kubejury_operator import handlers
    from kubejury_operator.reconcile import ProgressRecord

    status = {
        "phase": "Judging",
        "startedAt": "2026-11-30T01:00:00Z",
        "stages": {"generation": {"done": 40, "total": 40}, "judging": {"done": 20, "total": 80}},
        "conditions": [
            {"type": "GenerationComplete", "status": "True", "lastTransitionTime": "2026-11-30T01:10:00Z"},
            {"type": "JudgingComplete", "status": "False", "lastTransitionTime": "2026-11-30T01:00:00Z"},
        ],
    }
    progress = {
        ("generate", "primary", "qwen"): ProgressRecord.from_record(
            {"done": 40, "total": 40, "state": "succeeded"}
        ),
        ("judge", "primary", "j"): ProgressRecord.from_record(
            {"done": 20, "total": 80, "errors": 2, "parse_failures": 1, "rate_per_s": 2.0, "state": "running"}
        ),
    }
    obs = handlers.run_observation("ns", "r", status, progress)
    assert obs.generated == {"qwen": 40} and obs.judged == {"j": 20}
    assert obs.parse_failures == {"j": 1}
    assert obs.request_errors == {("j", "other"): 2}
    assert obs.eta_seconds == 30.0  # 60 items left at 2/s
    assert obs.stage_durations == {"generation": 600.0}
    assert obs.progress["judging"].total == 80


@pytest.mark.parametrize(
    ("example", "nodes"),
    [("evalrun-kind-cpu.yaml", "cpu-only.json"), ("evalrun-study.yaml", "mixed-cluster.json")],
)
def test_examples_plan_into_valid_objects(example: str, nodes: str) -> None:
    """The shipped examples on the shipped node lists: first reconcile's objects are valid Kubernetes."""
    import kubernetes_validate
    import yaml

    from kubejury_operator import handlers
    from kubejury_operator.manifests import WorkloadSettings
    from kubejury_operator.reconcile import DeploymentState, Observed, plan, run_inputs

    body = yaml.safe_load((REPO / "examples" / example).read_text())
    body["metadata"]["uid"] = "u-1"
    evalrun = parse_evalrun(body)
    node_items = json.loads((REPO / "examples" / "nodes" / nodes).read_text())["items"]
    run = run_inputs(body, evalrun, handlers.compute_placements(evalrun, node_items), WorkloadSettings())
    first = plan(run, Observed(), {}, "2026-11-30T02:00:00Z")
    unschedulable = [n for n, p in first.status["placement"].items() if not p["schedulable"]]
    assert not unschedulable, first.status["placement"]
    created = [a.manifest for a in first.actions if a.manifest is not None]
    assert {m["kind"] for m in created} >= {"ConfigMap", "Deployment", "Service"}
    # every server ready: the generation Jobs follow
    ready = {m["metadata"]["name"]: DeploymentState(1, 1) for m in created if m["kind"] == "Deployment"}
    second = plan(run, Observed(deployments=ready), first.status, "2026-11-30T02:01:00Z")
    created += [a.manifest for a in second.actions if a.manifest is not None and a.kind == "Job"]
    assert any(m["kind"] == "Job" for m in created)
    for manifest in created:
        for version in ("1.29", kubernetes_validate.latest_version()):
            kubernetes_validate.validate(manifest, version, strict=True)
    if example == "evalrun-kind-cpu.yaml":
        # sameAs judges share the models' servers: two Deployments, no GPUs
        deployments = [m for m in created if m["kind"] == "Deployment"]
        assert len(deployments) == 2
        for dep in deployments:
            container = dep["spec"]["template"]["spec"]["containers"][0]
            assert "nvidia.com/gpu" not in container["resources"].get("limits", {})
            assert container["args"][container["args"].index("--hf-repo") + 1].endswith(":Q4_K_M")
