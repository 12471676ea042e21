"""The e2e tests' cluster: KMock's Kubernetes API emulator plus a SIMULATED kubelet and controller-manager.

What is real here: the kopf operator (``kubejury_operator.handlers``) runs for real, in-process,
against KMock's ``KubernetesEmulator`` over HTTP on loopback; every object it creates is a real
API request; every Job command is the real ``kubejury generate|judge|aggregate`` CLI run as a
subprocess against real file storage.

What is SIMULATED (KMock stores objects but runs nothing, and has no garbage collector):

* kubelet + Deployment controller: a Deployment with ``replicas ≥ 1`` is marked ready; scaled to
  0, it is marked not ready. No Pods exist; no images are pulled.
* cluster DNS + the model servers: every ``http://<service>.<ns>.svc:8000/v1`` a Job is given is
  rewritten to one stub OpenAI-compatible server on loopback (``e2e_stub_openai``).
* Job controller + kubelet: each new Job's container command runs locally as a subprocess with the
  Job's arguments and environment (``secretKeyRef`` values read from the emulated Secrets), the
  spec ConfigMap written to a temp file in place of the mounted volume; retried up to
  ``backoffLimit``; then its status gets a ``Complete`` or ``Failed`` condition.
* garbage collector: objects whose owner EvalRun (by ``ownerReferences[].uid``) no longer exists
  are deleted.
* the API server's defaulting: tests create EvalRuns with ``metadata.uid`` and ``generation``
  set themselves (KMock assigns neither).
"""

from __future__ import annotations

import asyncio
import base64
import collections
import contextlib
import datetime
import os
import re
import sys
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import kmock

EVALRUNS = "kubejury.io/v1alpha1/evalruns"
RESOURCES: dict[str, dict[str, Any]] = {
    # kopf needs namespaces and CRDs in discovery, else it silently starts no watcher.
    "v1/namespaces": {"kind": "Namespace", "namespaced": False},
    "apiextensions.k8s.io/v1/customresourcedefinitions": {
        "kind": "CustomResourceDefinition",
        "namespaced": False,
    },
    EVALRUNS: {"kind": "EvalRun", "singular": "evalrun", "shortnames": {"er"}, "subresources": {"status"}},
    "v1/nodes": {"kind": "Node", "namespaced": False},
    "v1/pods": {"kind": "Pod"},  # the operator reads them; the simulation creates none
    "v1/secrets": {"kind": "Secret"},
    "v1/configmaps": {"kind": "ConfigMap"},
    "v1/serviceaccounts": {"kind": "ServiceAccount"},
    "v1/services": {"kind": "Service"},
    "v1/events": {"kind": "Event"},
    "apps/v1/deployments": {"kind": "Deployment", "subresources": {"status"}},
    "batch/v1/jobs": {"kind": "Job", "subresources": {"status"}},
}
VERBS = {"get", "list", "watch", "create", "update", "patch", "delete"}
_SVC_URL = re.compile(r"^http://[a-z0-9-]+\.[a-z0-9-]+\.svc:\d+/v1$")


def declare_resources(k8s: kmock.KubernetesEmulator) -> None:
    for key, info in RESOURCES.items():
        k8s.resources[key] = kmock.ResourceInfo(
            kind=info["kind"],
            singular=info.get("singular", info["kind"].lower()),
            namespaced=info.get("namespaced", True),
            verbs=VERBS,
            shortnames=info.get("shortnames", set()),
            subresources=info.get("subresources", set()),
        )


def _now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SimulatedCluster:
    """Plays kubelet, Deployment/Job controllers and the garbage collector (see module docstring)."""

    def __init__(self, k8s: kmock.KubernetesEmulator, api_url: str, stub_url: str, workdir: Path) -> None:
        self.k8s = k8s
        self.api = api_url.rstrip("/")
        self.stub_url = stub_url
        self.workdir = workdir
        self.job_runs: collections.Counter[str] = collections.Counter()  # attempts per Job name
        self.job_logs: dict[str, str] = {}
        self.max_model_servers_up = 0  # most evaluated-model Deployments with replicas ≥ 1 at once
        self.garbage_collected: list[str] = []
        self.errors: list[str] = []  # exceptions inside the simulation loop
        self.paused = False  # when True, no new Job starts (lets a test stop the operator mid-run)
        self._started: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._session: aiohttp.ClientSession | None = None

    # ------------------------------------------------------------------------------ API access

    def objects(self, plural: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Live objects of a resource, straight from the emulator's memory."""
        found = []
        for (resource, ns, _name), obj in list(self.k8s.objects.items()):
            if resource.plural == plural and not obj.deleted and (namespace is None or ns == namespace):
                found.append(dict(obj.raw))
        return found

    def get(self, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        return next((o for o in self.objects(plural, namespace) if o["metadata"]["name"] == name), None)

    async def request(self, method: str, path: str, body: Any = None) -> Any:
        assert self._session is not None
        headers = {"Content-Type": "application/merge-patch+json"} if method == "PATCH" else None
        async with self._session.request(method, self.api + path, json=body, headers=headers) as response:
            if response.status >= 400 and response.status != 404:
                raise AssertionError(f"{method} {path}: {response.status} {await response.text()}")
            return await response.json(content_type=None) if response.status != 404 else None

    # ------------------------------------------------------------------------------ lifecycle

    @contextlib.asynccontextmanager
    async def running(self) -> AsyncIterator[SimulatedCluster]:
        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15))
        loop = asyncio.create_task(self._loop())
        try:
            yield self
        finally:
            loop.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loop
            for task in list(self._tasks):
                task.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)
            await self._session.close()

    async def _loop(self) -> None:
        while True:
            try:
                await self._deployments()
                await self._jobs()
                await self._garbage_collect()
            except Exception as exc:  # keep simulating; tests print these when they time out
                self.errors.append(f"{type(exc).__name__}: {exc}")
            await asyncio.sleep(0.2)

    # ------------------------------------------------------------------- simulated controllers

    async def _deployments(self) -> None:
        up = 0
        for dep in self.objects("deployments"):
            meta = dep["metadata"]
            want = int(dep.get("spec", {}).get("replicas", 1))
            status = dep.get("status") or {}
            if want > 0 and meta.get("labels", {}).get("kubejury.io/endpoint", "").startswith("m-"):
                up += 1
            if int(status.get("readyReplicas") or 0) != want or "replicas" not in status:
                ready = {
                    "replicas": want,
                    "readyReplicas": want,
                    "availableReplicas": want,
                    "conditions": [
                        {"type": "Available", "status": "True" if want else "False", "reason": "Simulated"}
                    ],
                }
                path = f"/apis/apps/v1/namespaces/{meta['namespace']}/deployments/{meta['name']}/status"
                await self.request("PATCH", path, {"status": ready})
        self.max_model_servers_up = max(self.max_model_servers_up, up)

    async def _jobs(self) -> None:
        if self.paused:
            return
        for job in self.objects("jobs"):
            meta = job["metadata"]
            key = f"{meta['namespace']}/{meta['name']}"
            if key in self._started or (job.get("status") or {}).get("conditions"):
                continue
            self._started.add(key)
            path = f"/apis/batch/v1/namespaces/{meta['namespace']}/jobs/{meta['name']}/status"
            await self.request("PATCH", path, {"status": {"startTime": _now(), "active": 1}})
            task = asyncio.create_task(self._run_job(job, path))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def _secret_value(self, namespace: str, name: str, key: str) -> str | None:
        secret = self.get("secrets", namespace, name)
        if secret is None:
            return None
        if key in (secret.get("stringData") or {}):
            return str(secret["stringData"][key])
        raw = (secret.get("data") or {}).get(key)
        return base64.b64decode(raw).decode() if raw is not None else None

    def _command(self, job: Mapping[str, Any]) -> tuple[list[str], dict[str, str]]:
        """The Job's container command as a local process: args rewritten as the module docstring says."""
        meta = job["metadata"]
        pod = job["spec"]["template"]["spec"]
        container = pod["containers"][0]
        assert container["command"] == ["kubejury"], container["command"]
        spec_dir = self.workdir / "mounts" / meta["name"]
        spec_dir.mkdir(parents=True, exist_ok=True)
        for volume in pod.get("volumes", []):
            if "configMap" in volume:
                cm = self.get("configmaps", meta["namespace"], volume["configMap"]["name"])
                assert cm is not None, (
                    f"ConfigMap {volume['configMap']['name']} missing for Job {meta['name']}"
                )
                for file, text in cm["data"].items():
                    (spec_dir / file).write_text(text, encoding="utf-8")
        args = []
        for arg in container["args"]:
            if arg.startswith("/etc/kubejury/"):
                arg = str(spec_dir / arg.removeprefix("/etc/kubejury/"))
            elif _SVC_URL.match(arg):
                arg = self.stub_url
            args.append(arg)
        env = {k: v for k, v in os.environ.items() if not k.startswith("KUBEJURY_")}
        for item in container.get("env", []):
            if "value" in item:
                env[item["name"]] = str(item["value"])
            elif "secretKeyRef" in item.get("valueFrom", {}):
                ref = item["valueFrom"]["secretKeyRef"]
                value = self._secret_value(meta["namespace"], ref["name"], ref["key"])
                if value is not None:
                    env[item["name"]] = value
        env["HOME"] = str(self.workdir)
        return [sys.executable, "-m", "kubejury.cli", *args], env

    async def _run_job(self, job: Mapping[str, Any], status_path: str) -> None:
        try:
            await self._execute_job(job, status_path)
        except Exception as exc:  # a broken simulation must fail the Job visibly, not hang the test
            self.errors.append(f"Job {job['metadata']['name']}: {type(exc).__name__}: {exc}")
            failed = {
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "SimulationError", "message": str(exc)}
                ]
            }
            with contextlib.suppress(Exception):
                await self.request("PATCH", status_path, {"status": failed})

    async def _execute_job(self, job: Mapping[str, Any], status_path: str) -> None:
        meta = job["metadata"]
        attempts = int(job["spec"].get("backoffLimit", 0)) + 1
        command, env = self._command(job)
        code = -1
        output = b""
        for _ in range(attempts):
            self.job_runs[meta["name"]] += 1
            process = await asyncio.create_subprocess_exec(
                *command,
                env=env,
                cwd=self.workdir,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
            )
            try:
                output, _ = await asyncio.wait_for(process.communicate(), timeout=180)
            except TimeoutError:
                process.kill()
                output = b"timed out"
            code = process.returncode if process.returncode is not None else -1
            if code == 0:
                break
        self.job_logs[meta["name"]] = output.decode(errors="replace")
        if code == 0:
            status = {
                "active": 0,
                "succeeded": 1,
                "completionTime": _now(),
                "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": _now()}],
            }
        else:
            tail = output.decode(errors="replace")[-300:]
            status = {
                "active": 0,
                "failed": attempts,
                "conditions": [
                    {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded", "message": tail}
                ],
            }
        await self.request("PATCH", status_path, {"status": status})

    async def _garbage_collect(self) -> None:
        owners = {o["metadata"].get("uid") for o in self.objects("evalruns")}
        for plural, prefix in (
            ("jobs", "/apis/batch/v1"),
            ("deployments", "/apis/apps/v1"),
            ("services", "/api/v1"),
            ("configmaps", "/api/v1"),
            ("serviceaccounts", "/api/v1"),
        ):
            for obj in self.objects(plural):
                refs = obj["metadata"].get("ownerReferences") or []
                if refs and not any(r.get("uid") in owners for r in refs):
                    meta = obj["metadata"]
                    await self.request(
                        "DELETE", f"{prefix}/namespaces/{meta['namespace']}/{plural}/{meta['name']}"
                    )
                    self.garbage_collected.append(f"{plural}/{meta['name']}")
