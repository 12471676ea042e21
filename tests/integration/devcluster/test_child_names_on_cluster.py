"""Every child object of a run with a long name is accepted by the real API server.

Which names a Job, Service, label or Indexed Job's Pod hostname may carry is the API server's
decision (e.g. it rejects an Indexed Job when ``<name>-<completions-1>`` is not a DNS label), so
the objects ``kubejury plan --manifests`` renders are sent to a real kube-apiserver with
``--dry-run=server``: full validation and admission, nothing stored. Nothing here is simulated.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from devcluster import Cluster
from devcluster.cluster import ClusterError
from factories import build_evalrun_yaml, model_entry
from kubejury_operator import vocabulary as vocab
from kubejury_operator.preview import render

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


@pytest.fixture(scope="module")
def namespace(kube_cluster: Cluster) -> Iterator[str]:
    name = f"names-{uuid.uuid4().hex[:6]}"
    kube_cluster.kubectl("create", "namespace", name)
    yield name
    kube_cluster.kubectl("delete", "namespace", name, "--wait=false")


def rendered(
    kube_cluster: Cluster, namespace: str, tmp_path: Path, name: str, shards: int
) -> list[dict[str, Any]]:
    run_file = tmp_path / "run.yaml"
    run_file.write_text(
        build_evalrun_yaml(
            name,
            models=[model_entry("small-model", "hf://Qwen/Qwen3-8B", parameters="8B")],
            judges=[model_entry("judge", "https://judge.example.com/v1", runtime="openai")],
            storage={"uri": "s3://results/runs"},
            jobs={"generationShards": shards},
        ),
        encoding="utf-8",
    )
    objects = render(str(run_file), kube_cluster.get_json("nodes"), {}, namespace)
    for obj in objects:
        obj["metadata"].pop("ownerReferences", None)  # no EvalRun object here
    return objects


def server_rejections(kube_cluster: Cluster, namespace: str, objects: list[dict[str, Any]]) -> list[str]:
    """The API server's answer to each object it refuses (dry run: nothing is stored)."""
    refused = []
    for obj in objects:
        try:
            kube_cluster.kubectl(
                "create", "--dry-run=server", "-n", namespace, "-f", "-", input=yaml.safe_dump(obj)
            )
        except ClusterError as error:
            refused.append(f"{obj['kind']}/{obj['metadata']['name']}: {error}")
    return refused


@pytest.mark.parametrize(
    ("name", "shards"),
    [
        ("long-run-name-" + "x" * 36, 4),  # 50 characters: the e2e suite's case
        ("r" * 63, 64),  # the longest label-sized name, the most shards the spec allows
    ],
    ids=["50-chars-4-shards", "63-chars-64-shards"],
)
def test_the_api_server_accepts_every_child_of_a_long_named_run_including_indexed_jobs(
    kube_cluster: Cluster, namespace: str, tmp_path: Path, name: str, shards: int
) -> None:
    objects = rendered(kube_cluster, namespace, tmp_path, name, shards)
    indexed = [o for o in objects if o["kind"] == "Job" and o["spec"].get("completionMode") == "Indexed"]
    assert indexed, "the run renders no Indexed generation Job"
    assert server_rejections(kube_cluster, namespace, objects) == []


def test_two_long_run_names_sharing_63_characters_get_different_run_labels() -> None:
    first, second = "p" * 63 + "-first", "p" * 63 + "-second"
    assert vocab.label_value(first) != vocab.label_value(second)
    assert vocab.labels(first, "server")[vocab.LABEL_RUN] != vocab.labels(second, "server")[vocab.LABEL_RUN]
