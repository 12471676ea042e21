"""The README's walkthrough on a real node: helpers that do what a user types, and record what happened.

Why this module exists: :mod:`test_real_pods_e2e` runs "Try it on kind" on the dev cluster with a
real node (:mod:`devcluster.realnode`): the image built from the Dockerfile, the llama.cpp server
image, ``helm install``, ``kubectl cp``, ``kubectl apply`` of an EvalRun, ``kubectl logs``,
``kubejury status``. Everything here shells out to the same programs a user runs (kubectl, helm,
the kubejury CLI), so what the test proves is what the README promises.

Nothing is simulated inside the pods: the operator is the chart's Deployment pod, every Job is a
container, the model servers are llama.cpp's ``llama-server``. What stays simulated is named where
it happens: the GPU nodes (KWOK; this run places nothing on them), and the model weights, which come
from a ``pvc://`` volume the harness fills with the two GGUF models the project carries, since the
hub cannot be reached from here.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from operator_up import CHART, HELM, NAMESPACE, RELEASE, REPO, RESULTS_CLAIM, RESULTS_MOUNT

from devcluster import Cluster
from devcluster.realnode import REAL_NODE_LABEL, RealNode, local_volume

__all__ = [
    "CHART",
    "NAMESPACE",
    "RELEASE",
    "REPO",
    "RESULTS_CLAIM",
    "RESULTS_MOUNT",
]  # the walkthrough's names
MODELS_CLAIM = "kubejury-models"
KUBEJURY_CLI = Path(sys.executable).parent / "kubejury"
COMMAND_TIMEOUT_S = 300.0


class WalkthroughError(AssertionError):
    """A step of the walkthrough failed; the message names the command and quotes its output."""


def build_archive(script: str) -> Path:
    """Run one of scripts/build_*image.sh (cached builds); the OCI archive it prints last."""
    path = REPO / "scripts" / script
    if not path.exists():
        raise WalkthroughError(f"{path} is missing")
    done = subprocess.run(["bash", str(path)], stdout=subprocess.PIPE, text=True, check=False)
    if done.returncode != 0:
        raise WalkthroughError(f"{path} failed (exit {done.returncode}); its log is above")
    archive = Path(done.stdout.strip().splitlines()[-1])
    if not archive.is_file():
        raise WalkthroughError(f"{path} printed {archive}, which is not a file")
    return archive


def run(
    argv: Sequence[str],
    *,
    env: dict[str, str] | None = None,
    input: str | None = None,
    check: bool = True,
    timeout: float = COMMAND_TIMEOUT_S,
) -> subprocess.CompletedProcess[str]:
    """Run a user's command; on failure raise naming it and quoting its stderr."""
    try:
        done = subprocess.run(
            list(argv), env=env, input=input, capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired as error:
        raise WalkthroughError(f"`{' '.join(argv)}` did not finish in {timeout:.0f}s") from error
    if check and done.returncode != 0:
        raise WalkthroughError(
            f"`{' '.join(argv)}` failed (exit {done.returncode}):\n{done.stderr.strip()}\n{done.stdout[-2000:]}"
        )
    return done


@dataclass
class User:
    """A cluster admin at a terminal: kubectl, helm and the kubejury CLI with the admin kubeconfig."""

    cluster: Cluster

    def env(self) -> dict[str, str]:
        return self.cluster.env()

    def kubectl(
        self, *args: str, input: str | None = None, check: bool = True, timeout: float = COMMAND_TIMEOUT_S
    ) -> str:
        argv = [str(self.cluster.kubectl_path), *args]
        return run(argv, env=self.env(), input=input, check=check, timeout=timeout).stdout

    def kubectl_result(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        return run([str(self.cluster.kubectl_path), *args], env=self.env(), check=False, timeout=timeout)

    def apply(self, *documents: dict[str, Any], namespace: str | None = None) -> None:
        ns = ["-n", namespace] if namespace else []
        self.kubectl(*ns, "apply", "-f", "-", input=yaml.safe_dump_all(documents))

    def get(self, *args: str) -> Any:
        return json.loads(self.kubectl("get", *args, "-o", "json"))

    def helm(self, *args: str, timeout: float = COMMAND_TIMEOUT_S) -> str:
        if not HELM.exists():
            raise WalkthroughError(f"{HELM} is missing: run `make helm`")
        return run([str(HELM), *args], env=self.env(), timeout=timeout).stdout

    def kubejury(self, *args: str, timeout: float = 120.0) -> str:
        return run([str(KUBEJURY_CLI), *args], env=self.env(), timeout=timeout).stdout

    def pods(self, namespace: str, selector: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.get("pods", "-n", namespace, "-l", selector)["items"]
        return items

    def exec(
        self, namespace: str, pod: str, *command: str, container: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        where = ["-c", container] if container else []
        return self.kubectl_result("exec", "-n", namespace, pod, *where, "--", *command)


def wait_until(
    what: str,
    check: Callable[[], Any],
    timeout: float,
    diagnose: Callable[[], str] | None = None,
    interval: float = 2.0,
) -> Any:
    """Poll ``check`` until truthy; on timeout fail naming ``what`` with ``diagnose()``."""
    deadline = time.monotonic() + timeout
    while True:
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            detail = diagnose() if diagnose is not None else ""
            raise WalkthroughError(f"timed out after {timeout:.0f}s waiting for {what}\n{detail}")
        time.sleep(interval)


def running_pods(user: User, namespace: str, selector: str) -> list[dict[str, Any]]:
    return [
        p
        for p in user.pods(namespace, selector)
        if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]


def describe(user: User, namespace: str) -> str:
    """What a user looks at when a step hangs: pods, Jobs, events, the EvalRun."""
    parts = []
    for args in (
        ("get", "pods,jobs,deploy,svc,pvc", "-n", namespace, "-o", "wide"),
        ("get", "events", "-n", namespace, "--sort-by=.lastTimestamp"),
        ("get", "evalruns", "-n", namespace, "-o", "yaml"),
        ("logs", "-n", namespace, "-l", "app.kubernetes.io/component=operator", "--tail=60"),
    ):
        done = user.kubectl_result(*args)
        parts.append(f"$ kubectl {' '.join(args)}\n{done.stdout[-6000:]}{done.stderr[-1000:]}")
    return "\n".join(parts)


# --- volumes --------------------------------------------------------------------------------------


def claim(name: str, size: str, *, read_only_many: bool = False) -> dict[str, Any]:
    """A PersistentVolumeClaim bound to the static volume of the same name (no provisioner here)."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "volumeName": name,
            "resources": {"requests": {"storage": size}},
        },
    }


def results_volume(node: RealNode) -> dict[str, Any]:
    """The README's results claim needs a volume; kind's provisioner would make one, we make it static."""
    return local_volume(node, RESULTS_CLAIM, size="2Gi", storage_class="")


def models_volume(node: RealNode, models: Sequence[Path]) -> dict[str, Any]:
    """The weights' volume, filled by the harness with the project's two GGUF models (no hub here)."""
    volume = local_volume(node, MODELS_CLAIM, size="1Gi", storage_class="")
    target = Path(volume["spec"]["local"]["path"])
    for model in models:
        shutil.copyfile(model, target / model.name)
        (target / model.name).chmod(0o644)
    return volume


def results_dir(node: RealNode) -> Path:
    return node.volumes_dir() / RESULTS_CLAIM


def real_node_selector() -> str:
    return f"{REAL_NODE_LABEL}=true"
