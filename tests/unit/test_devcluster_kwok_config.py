"""KWOK's stages on the dev cluster: pods owned by a Job are never made Running or completed by KWOK
(the e2e suite's kubelet runner runs them); other pods are made Ready, deleted pods removed."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from devcluster.kwok_config import NODE_STAGES, NOT_OWNED_BY_JOB, POD_STAGES, kwok_stages, write_kwok_config


def stage(name: str) -> dict[str, object]:
    return {
        "apiVersion": "kwok.x-k8s.io/v1alpha1",
        "kind": "Stage",
        "metadata": {"name": name},
        "spec": {
            "selector": {
                "matchExpressions": [{"key": ".status.phase", "operator": "In", "values": ["Pending"]}]
            }
        },
    }


@pytest.fixture
def shipped(tmp_path: Path) -> Path:
    """A stand-in for the directory of KWOK's own stage files that the build copies."""
    for name in (*NODE_STAGES, *POD_STAGES, "pod-complete"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(stage(name)))
    return tmp_path


def test_pod_ready_excludes_job_pods_and_no_stage_completes_pods(shipped: Path, tmp_path: Path) -> None:
    path = write_kwok_config(shipped, tmp_path / "kwok.yaml")
    stages = {s["metadata"]["name"]: s for s in yaml.safe_load_all(path.read_text())}
    assert set(stages) == {"node-initialize", "node-heartbeat-with-lease", "pod-ready", "pod-delete"}
    assert NOT_OWNED_BY_JOB in stages["pod-ready"]["spec"]["selector"]["matchExpressions"]
    assert NOT_OWNED_BY_JOB not in stages["pod-delete"]["spec"]["selector"]["matchExpressions"]


def test_a_missing_stage_file_says_how_to_get_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="make kube-bins"):
        kwok_stages(tmp_path)
