"""``kubejury plan``: JSON contract, readable table, bad inputs, and no access to benchmark or storage."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from factories import build_evalrun_yaml, model_entry
from kubejury.cli import main

NODES = Path(__file__).resolve().parents[2] / "examples" / "nodes"
KEYS = {
    "schedulable",
    "runtime",
    "quantization",
    "tensor_parallel_size",
    "gpu_product",
    "node_selector",
    "reason",
}

MODELS = [
    model_entry("qwen3.5-27b", "hf://Qwen/Qwen3.5-27B", parameters="27B"),
    model_entry("llama-70b", "hf://meta-llama/Llama-3.3-70B-Instruct", parameters="70B"),
    model_entry(
        "qwq-32b", "hf://Qwen/QwQ-32B-GGUF", parameters="32B", runtime="llamacpp", quantization="Q4_K_M"
    ),
]
JUDGES = [
    model_entry("gpt-oss-120b", "hf://openai/gpt-oss-120b", parameters="117B-A5.1B", checkpoint="mxfp4"),
    model_entry("deepseek", "https://api.deepseek.com/v1", runtime="openai"),
]


@pytest.fixture
def evalrun(tmp_path: Path) -> Path:
    # The benchmark does not exist and the storage directory must stay uncreated: plan reads neither.
    file = tmp_path / "run.yaml"
    spec = build_evalrun_yaml(
        "study",
        benchmark=str(tmp_path / "missing.jsonl"),
        storage={"uri": str(tmp_path / "out")},
        models=MODELS,
        judges=JUDGES,
    )
    file.write_text(spec, encoding="utf-8")
    return file


def plan_json(evalrun: Path, nodes: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, object]]:
    assert main(["plan", "--evalrun", str(evalrun), "--nodes", str(nodes), "--format", "json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert set(document) == {"models"}
    models: dict[str, dict[str, object]] = document["models"]
    return models


def test_json_on_h100_cluster(evalrun: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = plan_json(evalrun, NODES / "h100-cluster.json", capsys)
    assert list(models) == ["qwen3.5-27b", "llama-70b", "qwq-32b", "gpt-oss-120b", "deepseek"]
    for entry in models.values():
        assert set(entry) == KEYS
    assert models["qwen3.5-27b"] == {
        **models["qwen3.5-27b"],
        "schedulable": True,
        "runtime": "vllm",
        "quantization": "fp8",
        "tensor_parallel_size": 1,
        "gpu_product": "NVIDIA-H100-80GB-HBM3",
        "node_selector": {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
    }
    assert (models["llama-70b"]["quantization"], models["llama-70b"]["tensor_parallel_size"]) == ("fp8", 2)
    assert (models["qwq-32b"]["runtime"], models["qwq-32b"]["quantization"]) == ("llamacpp", "q4_k_m")
    assert (models["gpt-oss-120b"]["quantization"], models["gpt-oss-120b"]["tensor_parallel_size"]) == (
        "mxfp4",
        1,
    )
    assert models["deepseek"]["runtime"] == "openai" and models["deepseek"]["gpu_product"] is None
    assert not (evalrun.parent / "out").exists()


def test_json_on_cpu_only_cluster(evalrun: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = plan_json(evalrun, NODES / "cpu-only.json", capsys)
    assert models["qwen3.5-27b"]["schedulable"] is False
    assert "Unschedulable" in str(models["qwen3.5-27b"]["reason"])
    assert models["qwq-32b"]["schedulable"] is True and models["qwq-32b"]["tensor_parallel_size"] == 0


def test_mixed_cluster_puts_gguf_on_small_gpus(evalrun: Path, capsys: pytest.CaptureFixture[str]) -> None:
    models = plan_json(evalrun, NODES / "mixed-cluster.json", capsys)
    assert models["qwq-32b"]["gpu_product"] == "NVIDIA-L4"
    assert models["llama-70b"]["gpu_product"] == "NVIDIA-H200"


def test_table_output(evalrun: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--evalrun", str(evalrun), "--nodes", str(NODES / "cpu-only.json")]) == 0
    out = capsys.readouterr().out
    for name in ("qwen3.5-27b", "llama-70b", "qwq-32b", "gpt-oss-120b", "deepseek"):
        assert name in out
    assert "NO" in out and "Unschedulable" in out


def test_fail_unschedulable_flag(evalrun: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["plan", "--evalrun", str(evalrun), "--format", "json", "--fail-unschedulable", "--nodes"]
    assert main([*args, str(NODES / "cpu-only.json")]) == 1
    assert main([*args, str(NODES / "h100-cluster.json")]) == 0


def test_yaml_node_list_is_accepted(
    evalrun: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import yaml

    nodes = tmp_path / "nodes.yaml"
    nodes.write_text(yaml.safe_dump(json.loads((NODES / "h100-cluster.json").read_text())), encoding="utf-8")
    assert plan_json(evalrun, nodes, capsys)["qwen3.5-27b"]["schedulable"] is True


def test_bad_inputs_are_one_line_errors(
    evalrun: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "nodes.json"
    bad.write_text('{"kind": "List", "items": [{"kind": "Pod"}]}', encoding="utf-8")
    assert main(["plan", "--evalrun", str(evalrun), "--nodes", str(bad)]) == 2
    assert "is not a Node" in capsys.readouterr().err
    bad.write_text("{not json: [", encoding="utf-8")
    assert main(["plan", "--evalrun", str(evalrun), "--nodes", str(bad)]) == 2
    assert "not valid JSON" in capsys.readouterr().err
    assert main(["plan", "--evalrun", str(tmp_path / "nope.yaml"), "--nodes", str(bad)]) == 2
    assert "file not found" in capsys.readouterr().err
    typo = yaml.safe_load(evalrun.read_text())
    typo["spec"]["models"][0]["gpu"] = 1
    (tmp_path / "typo.yaml").write_text(yaml.safe_dump(typo))
    assert (
        main(["plan", "--evalrun", str(tmp_path / "typo.yaml"), "--nodes", str(NODES / "cpu-only.json")]) == 2
    )
    assert "spec.models[0].gpu: unknown field" in capsys.readouterr().err


def test_plan_leaves_gpu_nodes_tainted_for_a_team_alone_unless_the_settings_tolerate_the_taint(
    evalrun: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster = json.loads((NODES / "h100-cluster.json").read_text())
    for node in cluster["items"]:
        if "nvidia.com/gpu" in node["status"]["allocatable"]:
            node["spec"]["taints"].append({"key": "dedicated", "value": "team-b", "effect": "NoSchedule"})
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps(cluster), encoding="utf-8")
    assert not plan_json(evalrun, nodes, capsys)["qwen3.5-27b"]["schedulable"]
    settings = tmp_path / "settings.yaml"
    team_b = [{"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}]
    settings.write_text(yaml.safe_dump({"KUBEJURY_GPU_TOLERATIONS": json.dumps(team_b)}), encoding="utf-8")
    args = [
        "plan",
        "--evalrun",
        str(evalrun),
        "--nodes",
        str(nodes),
        "--format",
        "json",
        "--settings",
        str(settings),
    ]
    assert main(args) == 0
    planned = json.loads(capsys.readouterr().out)["models"]["qwen3.5-27b"]
    assert planned["gpu_product"] == "NVIDIA-H100-80GB-HBM3"
