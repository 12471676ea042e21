"""KWOK's Stage configuration for the dev cluster: which simulated transitions KWOK performs.

KWOK ships default Stages; ``scripts/build_kube.sh`` copies four of them from the pinned KWOK module
next to the binaries. We use them as shipped except for one change:

* ``node-initialize`` and ``node-heartbeat-with-lease``: nodes become Ready and, with KWOK's node
  Leases, stay Ready.
* ``pod-ready``: a scheduled pod becomes Running and Ready — **except pods owned by a Job**, which we
  exclude with one more selector requirement. The operator's Job pods are run for real by the test
  suite's kubelet runner (tests/e2e), which reports their phase from the exit code so the real Job
  controller decides success and retries.
* ``pod-delete``: a pod being deleted is removed (KWOK plays the kubelet confirming the stop).

KWOK's ``pod-complete`` stage (which would mark every Job pod Succeeded) is deliberately left out.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

NODE_STAGES = ("node-initialize", "node-heartbeat-with-lease")
POD_STAGES = ("pod-ready", "pod-delete")

#: Added to ``pod-ready``'s selector: pods that a Job owns are not KWOK's to run.
NOT_OWNED_BY_JOB: dict[str, Any] = {
    "key": ".metadata.ownerReferences.[].kind",
    "operator": "NotIn",
    "values": ["Job"],
}


def stages_dir(bin_dir: Path) -> Path:
    """Where the build put KWOK's default Stage manifests (beside ``bin``)."""
    return bin_dir.parent / "kwok-stages"


def kwok_stages(source: Path) -> list[dict[str, Any]]:
    """The Stage objects KWOK runs, read from KWOK's own manifests in ``source``."""
    stages: list[dict[str, Any]] = []
    for name in NODE_STAGES + POD_STAGES:
        path = source / f"{name}.yaml"
        try:
            stage = yaml.safe_load(path.read_text())
        except OSError as error:
            raise FileNotFoundError(f"{path}: KWOK stage missing; run `make kube-bins` ({error})") from error
        if not isinstance(stage, dict) or stage.get("kind") != "Stage":
            raise ValueError(f"{path}: not a KWOK Stage")
        if name == "pod-ready":
            stage["spec"]["selector"]["matchExpressions"].append(dict(NOT_OWNED_BY_JOB))
        stages.append(stage)
    return stages


def write_kwok_config(source: Path, target: Path) -> Path:
    """Write the Stages as one multi-document YAML file for ``kwok --config``."""
    target.write_text(yaml.safe_dump_all(kwok_stages(source), sort_keys=False))
    return target
