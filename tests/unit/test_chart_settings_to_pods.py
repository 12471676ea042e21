"""The chart's settings, carried by the operator into the pods it creates.

``helm template`` renders the chart's settings ConfigMap; ``kubejury plan --manifests --settings``
feeds that ConfigMap to the operator's own planner (as ``envFrom`` does in the cluster). What a
chart value promises must then show in the Job and model-server pods — not only in the operator.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import yaml

from chart_harness import of_kind, render
from kubejury.cli import main
from kubejury_operator import images

ROOT = Path(__file__).resolve().parents[2]
STUDY = ROOT / "examples" / "evalrun-study.yaml"
H100 = ROOT / "examples" / "nodes" / "h100-cluster.json"


#: What the study example reaches: an admin who runs it lists its storage root and its model cache.
STUDY_ALLOWED = {
    "security": {
        "storageRoots": ["s3://kubejury/runs", "s3://kubejury/benchmarks"],
        "allowedClaims": ["kubejury-model-cache"],
    }
}


def _pods_for(settings: dict[str, Any], tmp_path: Path) -> list[dict[str, Any]]:
    configmap = next(
        c
        for c in of_kind(render(tmp_path, {**settings, **STUDY_ALLOWED}), "ConfigMap")
        if c["metadata"]["name"].endswith("-settings")
    )
    path = tmp_path / "settings.yaml"
    path.write_text(yaml.safe_dump(configmap), encoding="utf-8")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert (
            main(
                [
                    "plan",
                    "--evalrun",
                    str(STUDY),
                    "--nodes",
                    str(H100),
                    "--manifests",
                    "--settings",
                    str(path),
                ]
            )
            == 0
        )
    return [d for d in yaml.safe_load_all(out.getvalue()) if d]


def _env(obj: dict[str, Any]) -> dict[str, str]:
    (container,) = obj["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", "") for e in container.get("env", [])}


def test_the_charts_s3_endpoint_and_region_reach_every_job(tmp_path: Path) -> None:
    values = {"storage": {"s3Endpoint": "http://minio.minio:9000", "region": "eu-west-3"}}
    jobs = of_kind(_pods_for(values, tmp_path), "Job")
    assert jobs
    for job in jobs:
        env = _env(job)
        assert env.get("KUBEJURY_S3_ENDPOINT") == "http://minio.minio:9000", job["metadata"]["name"]
        assert env.get("AWS_REGION") == "eu-west-3"


def test_default_chart_runs_the_pinned_images_and_its_server_requests(tmp_path: Path) -> None:
    objects = _pods_for({"inference": {"serverRequests": {"cpu": "3", "memory": "20Gi"}}}, tmp_path)
    pinned = {i.reference for i in images.ALL}
    for deployment in of_kind(objects, "Deployment"):
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        assert container["image"] in pinned
        assert container["resources"]["requests"]["cpu"] == "3"


def test_docs_list_every_pinned_image_with_its_reason() -> None:
    chart_doc = (ROOT / "docs" / "chart.md").read_text(encoding="utf-8")
    for image in images.ALL:
        assert f"`{image.reference}`" in chart_doc, f"docs/chart.md does not list {image.reference}"
    values = yaml.safe_load((ROOT / "charts" / "kubejury" / "values.yaml").read_text(encoding="utf-8"))
    assert all(v == "" for v in values["inference"]["images"].values()), (
        "pin images in images.py, not values.yaml"
    )
