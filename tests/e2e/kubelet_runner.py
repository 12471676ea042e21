"""The e2e node agent: the SIMULATED parts of the real-control-plane harness, and nothing else.

Everything in the cluster is real (etcd, kube-apiserver with RBAC/admission/audit,
kube-controller-manager, kube-scheduler, KWOK nodes, the chart installed by helm, the operator
authenticated as its ServiceAccount). Exactly three things are simulated, all here:

1. **The kubelet for the operator's Job pods** (:class:`PodRunner`). It polls pods that carry the
   operator's labels, are owned by a Job and were bound to a node by the real scheduler. For each
   Pending pod it reads the pod's Secrets, ConfigMaps and PersistentVolumeClaims from the API,
   turns the container into a local process with :mod:`podexec` (command + args with ``$(VAR)``
   expansion; env with ``secretKeyRef``/``configMapKeyRef``/``fieldRef`` and ``envFrom``; each
   volume bind-mounted at its ``mountPath`` in a private mount namespace — ConfigMaps and Secrets
   written to ``<workdir>/pods/<uid>/volumes/<name>``, ``emptyDir`` an empty dir there, a claim
   the ``hostPath`` of its bound PersistentVolume), sets the pod ``Running`` and, when the
   process exits, ``Succeeded``/``Failed`` with ``containerStatuses[].state.terminated.exitCode``.
   The real Job controller then decides success, retries, ``backoffLimit`` and Indexed
   completions. A pod being deleted gets SIGTERM, then SIGKILL after its grace period, then is
   removed with grace 0, as the kubelet does. Logs: ``<workdir>/logs/<ns>/<pod>.log``.
   The process runs as the harness's user (no runAsUser mapping, no image: the image's
   ``kubejury`` command is this checkout's, first on ``PATH``).
2. **Model servers** (:class:`StubServices`). KWOK marks model-server pods Running and Ready
   (that is KWOK's job, configured by the cluster harness); for every Service the operator creates,
   a stub OpenAI-compatible server (``e2e_stub_openai.StubOpenAI``) listens on the Service's ports
   at a loopback address of its own (``127.77.x.y``) — only while at least one pod selected by the
   Service is Ready, like a Service with no ready endpoints. A stub answers at once, or after
   the seconds its namespace's ``e2e.kubejury.io/answer-seconds`` annotation names (tests that
   need stages of a realistic length relative to the control plane's reactions).
3. **Cluster DNS** (``dnsshim/sitecustomize.py``). Job processes get that directory on
   ``PYTHONPATH`` and ``KUBEJURY_E2E_HOSTS`` naming ``<workdir>/hosts.json``; their
   ``socket.getaddrinfo`` resolves ``<svc>.<ns>.svc[.cluster.local]`` to the Service's stub
   address. Chosen over rewriting URLs so the process sees byte-for-byte the args, env and spec
   the operator wrote (a wrong URL or port in a manifest still fails here), and over editing
   /etc/hosts because that is machine-wide and needs cleanup; all Job commands are Python.

Run as ``python tests/e2e/kubelet_runner.py --kubeconfig .cluster/kubeconfig --workdir DIR``
(``make operator-up`` starts it; SIGTERM stops it and kills every process it started).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parent))

import podexec
from e2e_stub_openai import StubOpenAI
from kubeapi import ApiError, KubeApi, KubeConfig

log = logging.getLogger("kubelet-runner")
HERE = Path(__file__).resolve().parent
SHIM_DIR = HERE / "dnsshim"
OPERATOR_LABELS = "app.kubernetes.io/managed-by=kubejury-operator"
POLL_S = 0.5


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def local_path() -> str:
    """PATH of a Job process: this interpreter's bin (the image's ``kubejury``) first."""
    return os.pathsep.join([str(Path(sys.executable).parent), "/usr/local/bin", "/usr/bin", "/bin"])


def owned_by_job(pod: Mapping[str, Any]) -> bool:
    return any(ref.get("kind") == "Job" for ref in pod["metadata"].get("ownerReferences") or [])


def running_status(pod: Mapping[str, Any], started: str) -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    return {
        "phase": "Running",
        "startTime": started,
        "conditions": [
            {"type": t, "status": "True", "lastTransitionTime": started}
            for t in ("PodScheduled", "Initialized", "ContainersReady", "Ready")
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": True,
                "started": True,
                "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            }
        ],
    }


def terminated_status(pod: Mapping[str, Any], started: str, code: int, message: str = "") -> dict[str, Any]:
    container = pod["spec"]["containers"][0]
    finished = now()
    terminated: dict[str, Any] = {
        "exitCode": code,
        "reason": "Completed" if code == 0 else "Error",
        "startedAt": started,
        "finishedAt": finished,
    }
    if message:
        terminated["message"] = message[-1000:]
    return {
        "phase": "Succeeded" if code == 0 else "Failed",
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": started},
            {"type": "Initialized", "status": "True", "lastTransitionTime": started},
            {
                "type": "ContainersReady",
                "status": "False",
                "reason": "PodCompleted",
                "lastTransitionTime": finished,
            },
            {"type": "Ready", "status": "False", "reason": "PodCompleted", "lastTransitionTime": finished},
        ],
        "containerStatuses": [
            {
                "name": container["name"],
                "image": container.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }
        ],
    }


@dataclass
class Running:
    pod: dict[str, Any]
    started: str
    process: asyncio.subprocess.Process | None = None
    task: asyncio.Task[None] | None = None
    deleting: bool = False


@dataclass
class PodRunner:
    """Simulated kubelet for Job pods (see the module docstring, part 1)."""

    api: KubeApi
    workdir: Path
    hosts_file: Path
    running: dict[str, Running] = field(default_factory=dict)  # by pod uid
    done: set[str] = field(default_factory=set)

    async def step(self) -> None:
        pods = await self.api.list("pods", labels=OPERATOR_LABELS)
        seen = set()
        for pod in pods:
            meta = pod["metadata"]
            uid = str(meta["uid"])
            seen.add(uid)
            if not owned_by_job(pod) or not pod["spec"].get("nodeName"):
                continue
            if meta.get("deletionTimestamp"):
                await self._stop(pod)
                continue
            phase = (pod.get("status") or {}).get("phase", "Pending")
            if uid in self.running or uid in self.done or phase in ("Succeeded", "Failed"):
                continue
            if phase == "Running":  # started by an earlier agent that is gone: the container is lost
                self.done.add(uid)
                await self._patch_status(pod, terminated_status(pod, now(), 137, "node agent restarted"))
                continue
            await self._start(pod)
        for uid, run in list(self.running.items()):
            if uid not in seen and not run.deleting:  # deleted without a grace period
                run.deleting = True
                self._signal(run, signal.SIGKILL)

    async def _lookup_data(
        self, pod: Mapping[str, Any]
    ) -> tuple[dict[tuple[str, str], dict[str, str] | None], dict[str, str]]:
        namespace = pod["metadata"]["namespace"]
        refs, claims = podexec.references(pod)
        data: dict[tuple[str, str], dict[str, str] | None] = {}
        for kind, name in refs:
            obj = await self.api.get("secrets" if kind == "Secret" else "configmaps", namespace, name)
            if obj is None:
                data[(kind, name)] = None
            elif kind == "Secret":
                data[(kind, name)] = podexec.decoded_secret(obj)
            else:
                data[(kind, name)] = {k: str(v) for k, v in (obj.get("data") or {}).items()}
        paths: dict[str, str] = {}
        for claim in claims:
            pvc = await self.api.get("persistentvolumeclaims", namespace, claim)
            volume = (pvc or {}).get("spec", {}).get("volumeName")
            pv = await self.api.get("persistentvolumes", None, volume) if volume else None
            host = ((pv or {}).get("spec") or {}).get("hostPath", {}).get("path")
            if not host:
                raise podexec.ContainerConfigError(f"claim {claim} is not bound to a hostPath volume")
            paths[claim] = str(host)
        return data, paths

    async def _start(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        uid = str(meta["uid"])
        pod_dir = self.workdir / "pods" / uid
        try:
            data, claims = await self._lookup_data(pod)
            spec = podexec.process_spec(
                pod,
                pod["spec"]["containers"][0],
                lookup=lambda kind, _ns, name: data.get((kind, name)),
                pod_dir=str(pod_dir),
                claim_path=lambda _ns, claim: claims[claim],
                base_env={
                    "PATH": local_path(),
                    "HOSTNAME": str(meta["name"]),
                    "PYTHONPATH": str(SHIM_DIR),
                    "KUBEJURY_E2E_HOSTS": str(self.hosts_file),
                    "LANG": "C.UTF-8",
                },
                keep_visible=(sys.prefix, str(HERE.parents[1])),  # this checkout, even under /tmp
            )
        except podexec.ContainerConfigError as exc:  # kubelet: stays Pending, retried
            log.warning("pod %s/%s: CreateContainerConfigError: %s", meta["namespace"], meta["name"], exc)
            return
        for directory in spec.directories:
            Path(directory).mkdir(parents=True, exist_ok=True)
        for file, text in spec.files.items():
            Path(file).parent.mkdir(parents=True, exist_ok=True)
            Path(file).write_text(text, encoding="utf-8")
        started = now()
        run = Running(pod=pod, started=started)
        self.running[uid] = run
        if not await self._patch_status(pod, running_status(pod, started)):
            del self.running[uid]
            return
        run.task = asyncio.create_task(self._execute(run, spec))

    async def _execute(self, run: Running, spec: podexec.ProcessSpec) -> None:
        meta = run.pod["metadata"]
        uid = str(meta["uid"])
        logs = self.workdir / "logs" / str(meta["namespace"])
        logs.mkdir(parents=True, exist_ok=True)
        code = 128
        with (logs / f"{meta['name']}.log").open("ab") as out:
            try:
                run.process = await asyncio.create_subprocess_exec(
                    *podexec.wrapped_argv(spec),
                    env=spec.env,
                    cwd=str(self.workdir),
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=out,
                    stderr=asyncio.subprocess.STDOUT,
                    start_new_session=True,
                )
                code = await run.process.wait()
            except OSError as exc:
                out.write(f"cannot start: {exc}\n".encode())
                code = 128
        if code < 0:  # killed by a signal: a container runtime reports 128 + signal
            code = 128 - code
        self.done.add(uid)
        self.running.pop(uid, None)
        log.info("pod %s/%s exited %d", meta["namespace"], meta["name"], code)
        await self._patch_status(run.pod, terminated_status(run.pod, run.started, code))
        if run.deleting:
            with contextlib.suppress(ApiError):
                await self.api.delete("pods", meta["namespace"], meta["name"], grace_seconds=0)

    def _signal(self, run: Running, sig: signal.Signals) -> None:
        if run.process is not None and run.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(run.process.pid, sig)

    async def _stop(self, pod: Mapping[str, Any]) -> None:
        uid = str(pod["metadata"]["uid"])
        run = self.running.get(uid)
        if run is None:  # nothing running: the kubelet confirms the deletion at once
            if uid not in self.done or (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                self.done.add(uid)
            with contextlib.suppress(ApiError):
                await self.api.delete(
                    "pods", pod["metadata"]["namespace"], pod["metadata"]["name"], grace_seconds=0
                )
            return
        if run.deleting:
            return
        run.deleting = True
        self._signal(run, signal.SIGTERM)
        grace = int(pod["spec"].get("terminationGracePeriodSeconds") or 30)

        async def kill_later() -> None:
            await asyncio.sleep(grace)
            self._signal(run, signal.SIGKILL)

        asyncio.get_running_loop().create_task(kill_later())

    async def _patch_status(self, pod: Mapping[str, Any], status: Mapping[str, Any]) -> bool:
        meta = pod["metadata"]
        try:
            await self.api.patch(
                "pods", meta["namespace"], meta["name"], {"status": dict(status)}, sub="status"
            )
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def kill_all(self) -> None:
        for run in self.running.values():
            self._signal(run, signal.SIGKILL)


# A namespace annotation the e2e tests set to make its stub servers take time per reply.
ANSWER_SECONDS_ANNOTATION = "e2e.kubejury.io/answer-seconds"


def stub_address(index: int) -> str:
    """The loopback address of the ``index``-th Service (127.77.0.1, 127.77.0.2, …)."""
    return f"127.77.{index // 250}.{index % 250 + 1}"


@dataclass
class StubServices:
    """One stub OpenAI-compatible server per operator Service (module docstring, parts 2 and 3)."""

    api: KubeApi
    hosts_file: Path
    quality: dict[str, int]
    addresses: dict[str, str] = field(default_factory=dict)  # "<svc>.<ns>" → 127.77.x.y
    servers: dict[str, list[StubOpenAI]] = field(default_factory=dict)

    def _write_hosts(self) -> None:
        tmp = self.hosts_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.addresses, indent=1, sort_keys=True))
        tmp.replace(self.hosts_file)

    async def step(self) -> None:
        services = await self.api.list("services", labels=OPERATOR_LABELS)
        wanted: set[str] = set()
        for service in services:
            meta = service["metadata"]
            key = f"{meta['name']}.{meta['namespace']}"
            wanted.add(key)
            if key not in self.addresses:
                self.addresses[key] = stub_address(len(self.addresses))
                self._write_hosts()
            ready = await self._has_ready_pod(meta["namespace"], service["spec"].get("selector") or {})
            if ready and key not in self.servers:
                stubs = []
                delay = await self._answer_seconds(meta["namespace"])
                for port in service["spec"].get("ports") or []:
                    stub = StubOpenAI(
                        self.quality, host=self.addresses[key], port=int(port["port"]), answer_seconds=delay
                    )
                    await stub.__aenter__()
                    stubs.append(stub)
                self.servers[key] = stubs
                log.info("stub for Service %s listening on %s", key, self.addresses[key])
            elif not ready and key in self.servers:
                await self._close(key)
        for key in list(self.servers):
            if key not in wanted:
                await self._close(key)

    async def _answer_seconds(self, namespace: str) -> float:
        """How long the stubs of a namespace take per reply: the namespace's
        ``e2e.kubejury.io/answer-seconds`` annotation (a test harness knob; 0 when absent)."""
        found = await self.api.get("namespaces", None, namespace)
        annotations = ((found or {}).get("metadata") or {}).get("annotations") or {}
        try:
            return max(0.0, float(annotations.get(ANSWER_SECONDS_ANNOTATION, 0)))
        except (TypeError, ValueError):
            return 0.0

    async def _has_ready_pod(self, namespace: str, selector: Mapping[str, str]) -> bool:
        if not selector:
            return False
        labels = ",".join(f"{k}={v}" for k, v in selector.items())
        for pod in await self.api.list("pods", namespace, labels=labels):
            if pod["metadata"].get("deletionTimestamp"):
                continue
            conditions = (pod.get("status") or {}).get("conditions") or []
            if any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions):
                return True
        return False

    async def _close(self, key: str) -> None:
        for stub in self.servers.pop(key, []):
            await stub.__aexit__(None, None, None)

    async def close(self) -> None:
        for key in list(self.servers):
            await self._close(key)


async def serve(kubeconfig: Path, workdir: Path, quality: dict[str, int], stop: asyncio.Event) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    hosts = workdir / "hosts.json"
    if not hosts.exists():
        hosts.write_text("{}")
    async with KubeApi(KubeConfig.load(kubeconfig)) as api:
        runner = PodRunner(api, workdir, hosts)
        stubs = StubServices(api, hosts, quality)
        try:
            while not stop.is_set():
                for part in (stubs, runner):
                    try:
                        await part.step()
                    except (TimeoutError, ApiError, OSError, aiohttp.ClientError) as exc:
                        log.warning("%s: %s", type(part).__name__, exc)
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), POLL_S)
        finally:
            runner.kill_all()
            await stubs.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--kubeconfig", required=True, type=Path)
    parser.add_argument("--workdir", required=True, type=Path)
    parser.add_argument(
        "--quality", default="{}", help="JSON: model name → answer quality 0-10 for the stubs"
    )
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        await serve(args.kubeconfig, args.workdir, dict(json.loads(args.quality)), stop)

    asyncio.run(run())
    return 0


if __name__ == "__main__":
    sys.exit(main())
