"""``kubejury plan --estimate --queue NAME``: the estimate under a Kueue ClusterQueue's GPU quota.

The quota is read as Kueue v0.17.0 stores it (a ClusterQueue, its ResourceFlavors, a LocalQueue);
flavours are matched to servers the way Kueue's flavour assigner does; ``maxConcurrentModels`` is
the largest whose worst case (that many evaluated models and every judge's server at once) fits
the nominal quota; the run starts when the first server fits what ``status.flavorsUsage`` leaves.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from factories import build_evalrun, build_evalrun_yaml, model_entry
from kubejury.cli import main
from kubejury.config.spec import EvalRunSpec, parse_evalrun
from kubejury.placement.quota import Quota, fit_quota, gpu_servers, parse_quota
from kubejury.records.placement import Placement

DATA = Path(__file__).resolve().parent / "data"
QUOTA_FILE = DATA / "kueue-h100-quota.yaml"
NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "h100-cluster.json"
MIXED_NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes" / "mixed-cluster.json"

H100 = "NVIDIA-H100-80GB-HBM3"
PRODUCT = "nvidia.com/gpu.product"
HOSTED_JUDGE = model_entry("hosted", "https://api.example.com/v1", runtime="openai")  # holds no GPU
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}


# ------------------------------------------------------------------------------- building blocks


def cluster_queue(
    flavors: Mapping[str, int | str],
    used: Mapping[str, int] | None = None,
    name: str = "gpu-team",
    **spec: Any,
) -> dict[str, Any]:
    """A v1beta2 ClusterQueue whose GPU group has ``flavors`` (name → nominal GPUs), in that order."""
    group = {
        "coveredResources": ["nvidia.com/gpu"],
        "flavors": [
            {"name": f, "resources": [{"name": "nvidia.com/gpu", "nominalQuota": n}]}
            for f, n in flavors.items()
        ],
    }
    queue: dict[str, Any] = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": name},
        "spec": {"resourceGroups": [group], **spec},
    }
    if used is not None:
        queue["status"] = {
            "flavorsUsage": [
                {"name": f, "resources": [{"name": "nvidia.com/gpu", "total": str(n)}]}
                for f, n in used.items()
            ]
        }
    return queue


def flavor(name: str, labels: Mapping[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    body: dict[str, Any] = dict(spec)
    if labels is not None:
        body["nodeLabels"] = dict(labels)
    return {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": name},
        "spec": body,
    }


def h100_quota(nominal: int = 8, used: int | None = None) -> Quota:
    return parse_quota(
        [
            cluster_queue({"h100": nominal}, None if used is None else {"h100": used}),
            flavor("h100", {PRODUCT: H100}),
        ]
    )


def gpu_placement(gpus: int, product: str = H100, **fields: Any) -> Placement:
    return Placement(
        runtime="vllm",
        quantization="fp8",
        tensor_parallel_size=gpus,
        gpu_product=product,
        node_selector={PRODUCT: product},
        tolerations=(GPU_TAINT,),
        **fields,
    )


def run_spec(models: Sequence[str], judges: Sequence[str] = (), max_models: int = 4) -> EvalRunSpec:
    body = build_evalrun(
        models=[model_entry(m, parameters="8B") for m in models],
        judges=[model_entry(j, parameters="8B") for j in judges] or [HOSTED_JUDGE],
        maxConcurrentModels=max_models,
    )
    return parse_evalrun(body).spec


# ------------------------------------------------------------------------------------- the quota


def test_the_fixture_reads_as_gpus_per_flavour_with_labels_usage_and_cohort() -> None:
    documents = list(yaml.safe_load_all(QUOTA_FILE.read_text(encoding="utf-8")))
    quota = parse_quota(documents, "team-a")
    assert quota.cluster_queue == "gpu-team" and quota.local_queue == "team-a"
    assert [(f.name, f.nominal, f.used, f.free) for f in quota.flavors] == [("h100", 8, 6, 2)]
    assert quota.flavors[0].node_labels == {PRODUCT: H100}
    assert quota.cohort == "research" and quota.has_usage


def test_reserved_quota_counts_as_used_when_above_usage_and_a_list_is_read_through() -> None:
    queue = cluster_queue({"h100": 8}, {"h100": 2}, cohort="old-api")  # v1beta1 spells the cohort so
    queue["status"]["flavorsReservation"] = [
        {"name": "h100", "resources": [{"name": "nvidia.com/gpu", "total": 5}]}
    ]
    listed = {"apiVersion": "v1", "kind": "List", "items": [queue, flavor("h100", {PRODUCT: H100})]}
    quota = parse_quota([listed])
    assert quota.flavors[0].used == 5 and quota.flavors[0].free == 3
    assert quota.cohort == "old-api"


def test_a_queue_without_status_takes_every_gpu_as_free_and_says_so() -> None:
    quota = h100_quota(8)
    assert quota.flavors[0].free == 8 and not quota.has_usage
    fit = fit_quota(run_spec(["a"]), {"a": gpu_placement(1)}, quota, {})
    assert any("no status.flavorsUsage" in note for note in fit.notes)


def test_the_local_queue_picks_the_cluster_queue_and_an_ambiguous_file_is_refused() -> None:
    documents = [
        cluster_queue({"h100": 8}, name="a"),
        cluster_queue({"h100": 2}, name="b"),
        {
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "LocalQueue",
            "metadata": {"name": "lq"},
            "spec": {"clusterQueue": "b"},
        },
    ]
    assert parse_quota(documents, "lq").cluster_queue == "b"
    with pytest.raises(ValueError, match=r"2 ClusterQueues are given \(a, b\)"):
        parse_quota(documents[:2], None)


def test_a_cluster_queue_without_a_name_is_refused() -> None:
    with pytest.raises(ValueError, match=r"no metadata\.name"):
        parse_quota([{"kind": "ClusterQueue"}])


def test_a_fractional_gpu_quota_is_refused() -> None:
    with pytest.raises(ValueError, match="not a whole number of GPUs"):
        parse_quota([cluster_queue({"h100": "1500m"})])


# --------------------------------------------------------------------------- flavours, as Kueue


def test_a_flavour_matches_on_the_label_keys_the_group_uses_only() -> None:
    quota = parse_quota([cluster_queue({"h100": 8}), flavor("h100", {PRODUCT: H100})])
    # placement pins the memory too (two H100 pools); no flavour uses that key, so Kueue ignores it
    placement = Placement(
        runtime="vllm",
        quantization="fp8",
        tensor_parallel_size=1,
        gpu_product=H100,
        node_selector={PRODUCT: H100, "nvidia.com/gpu.memory": "81559"},
    )
    assert [f.name for f in quota.matching(placement)] == ["h100"]
    assert quota.matching(gpu_placement(1, "NVIDIA-A100-SXM4-80GB")) == ()


def test_a_flavour_without_labels_matches_only_when_no_flavour_uses_the_key() -> None:
    alone = parse_quota([cluster_queue({"any": 8}), flavor("any")])
    assert [f.name for f in alone.matching(gpu_placement(1, "NVIDIA-L4"))] == ["any"]
    beside = parse_quota(
        [cluster_queue({"h100": 8, "any": 8}), flavor("h100", {PRODUCT: H100}), flavor("any")]
    )
    assert [f.name for f in beside.matching(gpu_placement(1, "NVIDIA-L4"))] == []
    assert [f.name for f in beside.matching(gpu_placement(1))] == ["h100"]


def test_a_flavour_whose_taint_the_server_does_not_tolerate_is_not_used() -> None:
    reserved = {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}
    quota = parse_quota([cluster_queue({"h100": 8}), flavor("h100", {PRODUCT: H100}, nodeTaints=[reserved])])
    assert quota.matching(gpu_placement(1)) == ()
    tolerant = parse_quota(
        [
            cluster_queue({"h100": 8}),
            flavor(
                "h100",
                {PRODUCT: H100},
                nodeTaints=[reserved],
                tolerations=[{"key": "dedicated", "operator": "Exists"}],
            ),
        ]
    )
    assert [f.name for f in tolerant.matching(gpu_placement(1))] == ["h100"]


def test_the_gpu_taint_of_a_flavour_is_tolerated_by_every_gpu_server() -> None:
    quota = parse_quota([cluster_queue({"h100": 8}), flavor("h100", {PRODUCT: H100}, nodeTaints=[GPU_TAINT])])
    untainted_nodes = Placement(
        runtime="vllm",
        quantization="fp8",
        tensor_parallel_size=1,
        gpu_product=H100,
        node_selector={PRODUCT: H100},
    )
    assert [f.name for f in quota.matching(untainted_nodes)] == ["h100"]


def test_a_flavour_named_but_not_given_matches_nothing() -> None:
    quota = parse_quota([cluster_queue({"h100": 8})])
    assert quota.matching(gpu_placement(1)) == ()
    fit = fit_quota(run_spec(["a"]), {"a": gpu_placement(1)}, quota, {})
    assert fit.uncoverable and "no ResourceFlavor given" in fit.uncoverable[0][1]


# ------------------------------------------------------------------------- maxConcurrentModels


def test_concurrency_is_the_largest_whose_models_and_judges_fit_the_nominal_quota() -> None:
    spec = run_spec(["m1", "m2", "m3", "m4", "m5"], judges=["judge"], max_models=4)
    plans = {m: gpu_placement(2) for m in ("m1", "m2", "m3", "m4", "m5")} | {"judge": gpu_placement(2)}
    fit = fit_quota(spec, plans, h100_quota(8), {})
    assert fit.max_concurrent_models == 3  # 3 × 2 + the judge's 2 = 8
    assert fit.need == {"h100": 8} and fit.need_one_more == {"h100": 10}
    assert fit.fits and fit.spec_max_concurrent_models == 4


def test_models_are_counted_per_flavour_they_compete_for() -> None:
    quota = parse_quota(
        [
            cluster_queue({"h100": 2, "l4": 8}),
            flavor("h100", {PRODUCT: H100}),
            flavor("l4", {PRODUCT: "NVIDIA-L4"}),
        ]
    )
    spec = run_spec(["big1", "big2", "big3", "s1", "s2"], max_models=8)
    plans = {b: gpu_placement(2) for b in ("big1", "big2", "big3")} | {
        s: gpu_placement(1, "NVIDIA-L4") for s in ("s1", "s2")
    }
    # one 2-GPU H100 model at a time fills h100, whatever the L4 models do
    assert fit_quota(spec, plans, quota, {}).max_concurrent_models == 1


def test_two_flavours_of_one_product_are_filled_in_the_queues_order() -> None:
    quota = parse_quota(
        [
            cluster_queue({"h100-reserved": 4, "h100-spot": 4}),
            flavor("h100-reserved", {PRODUCT: H100}),
            flavor("h100-spot", {PRODUCT: H100}),
        ]
    )
    spec = run_spec(["a", "b", "c"])
    fit = fit_quota(spec, {m: gpu_placement(4) for m in ("a", "b", "c")}, quota, {})
    assert fit.max_concurrent_models == 2
    assert fit.need == {"h100-reserved": 4, "h100-spot": 4}


def test_when_one_model_and_the_judges_do_not_fit_the_servers_take_turns() -> None:
    spec = run_spec(["a", "b"], judges=["judge"])
    plans = {"a": gpu_placement(4), "b": gpu_placement(4), "judge": gpu_placement(4)}
    fit = fit_quota(spec, plans, h100_quota(4), {})
    assert fit.max_concurrent_models == 1 and not fit.fits and not fit.uncoverable


def test_a_server_bigger_than_the_quota_is_never_admitted() -> None:
    spec = run_spec(["small", "huge"])
    fit = fit_quota(spec, {"small": gpu_placement(1), "huge": gpu_placement(8)}, h100_quota(4), {})
    assert [name for name, _ in fit.uncoverable] == ["huge"]
    assert "needs 8 GPUs at once" in fit.uncoverable[0][1] and "is 4" in fit.uncoverable[0][1]


def test_servers_without_work_or_gpus_do_not_count() -> None:
    spec = run_spec(["done", "cpu", "left"], judges=["judge"])
    plans = {
        "done": gpu_placement(4),
        "cpu": Placement(runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0),
        "left": gpu_placement(2),
        "judge": gpu_placement(2),
    }
    work = {("done", "generation"): False, ("judge", "judging"): True}
    servers = gpu_servers(spec, plans, work)
    assert [(s.name, s.role, s.gpus) for s in servers] == [("left", "model", 2), ("judge", "judge", 2)]


def test_a_model_that_is_also_a_judge_is_outside_the_budget() -> None:
    body = build_evalrun(
        models=[model_entry("a", parameters="8B"), model_entry("b", parameters="8B")],
        judges=[model_entry("a-judge", "hf://org/a", parameters="8B", sameAs="a")],
    )
    spec = parse_evalrun(body).spec
    servers = gpu_servers(
        spec, {"a": gpu_placement(1), "b": gpu_placement(1), "a-judge": gpu_placement(1)}, {}
    )
    assert [(s.name, s.role) for s in servers] == [("b", "model"), ("a", "model+judge")]


# ----------------------------------------------------------------------------------- the start


def test_the_run_waits_for_the_gpus_its_first_server_lacks() -> None:
    spec = run_spec(["first", "second"])
    plans = {"first": gpu_placement(2), "second": gpu_placement(1)}
    fit = fit_quota(spec, plans, h100_quota(8, used=7), {}, order=["first", "second"])
    assert fit.first is not None and fit.first.name == "first"
    assert fit.wait == ("h100", 1)
    assert fit_quota(spec, plans, h100_quota(8, used=6), {}, order=["first", "second"]).wait is None


def test_the_concurrency_free_now_is_reported_apart() -> None:
    spec = run_spec(["a", "b", "c", "d"])
    fit = fit_quota(spec, {m: gpu_placement(2) for m in "abcd"}, h100_quota(8, used=4), {})
    assert (fit.max_concurrent_models, fit.now) == (4, 2)


# -------------------------------------------------------------------------------- the command


def write_run(tmp_path: Path, max_models: int = 4) -> Path:
    models = [model_entry(f"m{i}", f"hf://org/m{i}", parameters="70B") for i in range(4)]
    judges = [model_entry("judge", "hf://org/judge", parameters="8B")]
    file = tmp_path / "run.yaml"
    file.write_text(
        build_evalrun_yaml(
            "q",
            benchmark={"uri": "bench.jsonl", "language": "en"},
            models=models,
            judges=judges,
            maxConcurrentModels=max_models,
        ),
        encoding="utf-8",
    )
    return file


def plan_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str, nodes: Path = NODES
) -> dict[str, Any]:
    args = [
        "plan",
        "--evalrun",
        str(write_run(tmp_path)),
        "--nodes",
        str(nodes),
        "--estimate",
        "--questions",
        "200",
    ]
    assert main([*args, "--format", "json", *extra]) == 0
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def test_the_estimate_is_made_at_the_concurrency_the_quota_fits(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    document = plan_json(tmp_path, capsys, "--queue", "team-a", "--quota", str(QUOTA_FILE))
    quota = document["quota"]
    # 70B models run FP8 on 2 H100s each, the 8B judge on 1: 3 × 2 + 1 = 7 of 8; 4 would need 9
    assert quota["max_concurrent_models"] == 3 and quota["spec_max_concurrent_models"] == 4
    assert quota["gpus_at_once"] == {"h100": 7} and quota["gpus_at_one_more"] == {"h100": 9}
    assert document["estimate"]["max_concurrent_models"] == 3
    assert quota["waits_for"] is None and quota["first_server"] in {"m0", "m1", "m2", "m3"}
    assert quota["spec_wall_hours"] <= document["estimate"]["totals"]["wall_hours"]
    assert quota["if_nothing_is_freed"]["max_concurrent_models"] == 1  # 2 free: one model, or the judge


def test_the_table_says_when_it_starts_and_how_long_it_takes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    busy = tmp_path / "busy.yaml"
    busy.write_text(
        QUOTA_FILE.read_text(encoding="utf-8").replace('total: "6"', 'total: "8"'), encoding="utf-8"
    )
    args = [
        "plan",
        "--evalrun",
        str(write_run(tmp_path)),
        "--nodes",
        str(NODES),
        "--estimate",
        "--questions",
        "200",
    ]
    assert main([*args, "--queue", "team-a", "--quota", str(busy)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "LocalQueue team-a → ClusterQueue gpu-team" in out
    assert "maxConcurrentModels=3 fits the quota (the spec says 4)" in out
    assert "Start: waits for 2 GPU(s) of flavour h100 to be freed (8 of 8 in use" in out
    assert "cannot be known" in out and "From that moment the run takes" in out
    assert "cohort research" in out


def test_a_spec_below_what_the_quota_fits_is_shown_beside_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_run(tmp_path, max_models=1)
    args = ["plan", "--evalrun", str(run), "--nodes", str(NODES), "--estimate", "--questions", "200"]
    assert main([*args, "--quota", str(QUOTA_FILE)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "maxConcurrentModels=3 fits the quota (the spec says 1)" in out
    assert "With the spec's maxConcurrentModels=1 the run takes" in out


def test_a_product_no_flavour_covers_is_named(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--evalrun", str(write_run(tmp_path)), "--nodes", str(MIXED_NODES), "--estimate"]
    args += ["--questions", "200", "--quota", str(QUOTA_FILE), "--fail-unschedulable"]
    assert main(args) == 1
    out = " ".join(capsys.readouterr().out.split())
    assert "not coverable by this queue: m0: NVIDIA-H200 matches no flavour of ClusterQueue gpu-team" in out
    assert "the run cannot complete under this queue" in out


def test_queue_needs_estimate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--evalrun", str(write_run(tmp_path)), "--nodes", str(NODES), "--queue", "team-a"]
    assert main(args) != 0
    assert "--estimate" in capsys.readouterr().err


class FakeKueue:
    """The three read-only calls plan makes, answered from the fixture (v1beta2 only)."""

    def __init__(self) -> None:
        docs = list(yaml.safe_load_all(QUOTA_FILE.read_text(encoding="utf-8")))
        self.by_kind: dict[str, list[dict[str, Any]]] = {}
        for doc in docs:
            self.by_kind.setdefault(doc["kind"], []).append(doc)
        self.calls: list[tuple[str, ...]] = []

    def _found(self, kind: str, version: str, name: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException

        found = [o for o in self.by_kind.get(kind, []) if o["metadata"]["name"] == name]
        if version != "v1beta2" or not found:
            raise ApiException(status=404, reason="Not Found")
        return found[0]

    def get_namespaced_custom_object(
        self, group: str, version: str, namespace: str, plural: str, name: str
    ) -> dict[str, Any]:
        self.calls.append(("get", plural, namespace, name))
        return self._found("LocalQueue", version, name)

    def get_cluster_custom_object(self, group: str, version: str, plural: str, name: str) -> dict[str, Any]:
        self.calls.append(("get", plural, name))
        return self._found("ClusterQueue", version, name)

    def list_cluster_custom_object(self, group: str, version: str, plural: str) -> dict[str, Any]:
        self.calls.append(("list", plural))
        return {"items": self.by_kind["ResourceFlavor"]}


def test_the_queue_is_read_from_the_cluster_through_the_kubeconfig(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import kubejury.commands.status as status

    api = FakeKueue()
    seen: list[argparse.Namespace] = []

    def fake_api(args: argparse.Namespace) -> tuple[Any, str]:
        seen.append(args)
        return api, args.namespace or "default"

    monkeypatch.setattr(status, "_api", fake_api)
    quota = plan_json(tmp_path, capsys, "--queue", "team-a", "--namespace", "evals", "--context", "prod")[
        "quota"
    ]
    assert quota["cluster_queue"] == "gpu-team" and quota["max_concurrent_models"] == 3
    assert (seen[0].namespace, seen[0].context) == ("evals", "prod")
    assert api.calls == [
        ("get", "localqueues", "evals", "team-a"),
        ("get", "clusterqueues", "gpu-team"),
        ("list", "resourceflavors"),
    ]
    capsys.readouterr()
    args = [
        "plan",
        "--evalrun",
        str(write_run(tmp_path)),
        "--nodes",
        str(NODES),
        "--estimate",
        "--questions",
        "9",
    ]
    assert main([*args, "--queue", "nope", "--namespace", "evals"]) != 0
    assert "LocalQueue evals/nope not found" in capsys.readouterr().err
