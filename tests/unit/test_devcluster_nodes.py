"""The dev cluster's nodes file: a NodeList whose nodes are created as written, minus what a server
or kubelet sets; bad files are rejected naming the file and the node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from devcluster import DEFAULT_NODES_FILE, NodesFileError, load_nodes


def write(tmp_path: Path, document: object, name: str = "nodes.yaml") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document) if name.endswith(".json") else yaml.safe_dump(document))
    return path


def test_default_file_has_the_gpu_pools_of_the_issue_with_gfd_labels_capacity_and_taint() -> None:
    nodes = load_nodes(DEFAULT_NODES_FILE)
    products: dict[str, int] = {}
    for node in nodes:
        labels = node["metadata"]["labels"]
        gpus = node["status"]["allocatable"].get("nvidia.com/gpu")
        if gpus is None:
            assert "nvidia.com/gpu.product" not in labels and not node["spec"].get("taints")
            continue
        products[labels["nvidia.com/gpu.product"]] = products.get(labels["nvidia.com/gpu.product"], 0) + 1
        assert labels["nvidia.com/gpu.count"] == gpus == node["status"]["capacity"]["nvidia.com/gpu"]
        assert int(labels["nvidia.com/gpu.memory"]) > 20_000
        assert {"nvidia.com/gpu.compute.major", "nvidia.com/cuda.driver.major"} <= set(labels)
        assert {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"} in node["spec"]["taints"]
    assert products == {
        "NVIDIA-H100-80GB-HBM3": 8,
        "NVIDIA-A100-SXM4-40GB": 4,
        "NVIDIA-L4": 1,
        "NVIDIA-B200": 8,
    }
    assert len(nodes) > sum(products.values())  # plus CPU-only nodes


def test_output_of_kubectl_get_nodes_is_accepted_and_server_and_kubelet_fields_dropped(
    tmp_path: Path,
) -> None:
    node = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": "n1", "uid": "u", "resourceVersion": "7", "labels": {"a": "b"}},
        "spec": {"taints": []},
        "status": {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}, "conditions": [{"type": "Ready"}]},
    }
    # kubectl get nodes -o json says kind: List
    path = write(tmp_path, {"apiVersion": "v1", "kind": "List", "items": [node]}, "nodes.json")
    (created,) = load_nodes(path)
    assert created["metadata"] == {"name": "n1", "labels": {"a": "b"}}
    assert created["status"] == {"capacity": {"cpu": "4"}, "allocatable": {"cpu": "4"}}


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"kind": "Node", "metadata": {"name": "x"}}, "expected a NodeList"),
        ({"kind": "NodeList", "items": []}, "has no items"),
        (
            {"kind": "NodeList", "items": [{"kind": "Node", "metadata": {}}]},
            "items[0]: metadata.name is missing",
        ),
        (
            {"kind": "NodeList", "items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "a"}}]},
            "items[1]: duplicate node name 'a'",
        ),
        (
            {"kind": "NodeList", "items": [{"metadata": {"name": "a", "labels": {"n": 8}}}]},
            "node 'a': metadata.labels must map names to strings",
        ),
    ],
)
def test_bad_files_are_rejected_naming_the_file_and_item(
    tmp_path: Path, document: object, message: str
) -> None:
    path = write(tmp_path, document)
    with pytest.raises(NodesFileError) as error:
        load_nodes(path)
    assert str(path) in str(error.value)
    assert message in str(error.value)


def test_unparsable_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "nodes.yaml"
    path.write_text("items: [unclosed\n")
    with pytest.raises(NodesFileError, match="not valid YAML"):
        load_nodes(path)
