"""A small JSON client for the benchmark harness: REST calls and list+watch, from a kubeconfig.

Why this module exists: the harness creates hundreds of runs, patches thousands of pod statuses
and watches Pods, Jobs and EvalRuns for an hour; the e2e harness's client parses every answer as
YAML (slow at that volume) and has no watch. This one speaks JSON with ``orjson``, keeps one
connection pool, and :meth:`Kube.watch` follows a resource from a list's ``resourceVersion`` (with
bookmarks), listing again when the server says the version is gone (410). The operator never uses
it: the operator's own client is what is measured.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import ssl
import tempfile
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import yaml

log = logging.getLogger("kube")

GROUPS = {
    "deployments": "apps/v1",
    "jobs": "batch/v1",
    "evalruns": "kubejury.io/v1alpha1",
}
CLUSTER_SCOPED = {"namespaces", "nodes", "persistentvolumes"}
WATCH_TIMEOUT_S = 290


class KubeError(Exception):
    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"{status}: {message}")


def path_of(
    resource: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """REST path of a resource (plural), optionally in a namespace, one object, a subresource."""
    group = GROUPS.get(resource)
    path = f"/apis/{group}" if group else "/api/v1"
    if namespace is not None and resource not in CLUSTER_SCOPED:
        path += f"/namespaces/{namespace}"
    path += f"/{resource}"
    if name is not None:
        path += f"/{name}"
    if sub is not None:
        path += f"/{sub}"
    return path


@dataclass(frozen=True)
class Credentials:
    """The current context of a kubeconfig: server, CA, and a client certificate or a token."""

    server: str
    ca_pem: bytes | None
    cert_pem: bytes | None
    key_pem: bytes | None
    token: str | None

    @classmethod
    def load(cls, path: Path) -> Credentials:
        config = yaml.safe_load(path.read_text())
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts.get(config.get("current-context")) or next(iter(contexts.values()))
        cluster = {c["name"]: c["cluster"] for c in config["clusters"]}[context["cluster"]]
        user = {u["name"]: u["user"] for u in config.get("users") or []}.get(context.get("user"), {})

        def pem(entry: Mapping[str, Any], key: str) -> bytes | None:
            if entry.get(f"{key}-data"):
                return base64.b64decode(entry[f"{key}-data"])
            return Path(entry[key]).read_bytes() if entry.get(key) else None

        return cls(
            server=str(cluster["server"]).rstrip("/"),
            ca_pem=pem(cluster, "certificate-authority"),
            cert_pem=pem(user, "client-certificate"),
            key_pem=pem(user, "client-key"),
            token=user.get("token"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        if self.ca_pem:
            context.load_verify_locations(cadata=self.ca_pem.decode())
        if self.cert_pem and self.key_pem:
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
                cert.write_bytes(self.cert_pem)
                key.write_bytes(self.key_pem)
                context.load_cert_chain(str(cert), str(key))
        return context


WatchHandler = Callable[[str, dict[str, Any]], Awaitable[None] | None]


class Kube:
    """``async with Kube(Credentials.load(path)) as kube:`` — JSON REST as the kubeconfig's user."""

    def __init__(self, credentials: Credentials, *, connections: int = 32) -> None:
        self.credentials = credentials
        self._connections = connections
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> Kube:
        headers = {"Authorization": f"Bearer {self.credentials.token}"} if self.credentials.token else {}
        self._session = aiohttp.ClientSession(
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=60),
            connector=aiohttp.TCPConnector(ssl=self.credentials.ssl_context(), limit=self._connections),
            json_serialize=lambda obj: orjson.dumps(obj).decode(),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    @property
    def session(self) -> aiohttp.ClientSession:
        assert self._session is not None, "use Kube as an async context manager"
        return self._session

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        async with self.session.request(
            method,
            self.credentials.server + path,
            data=None if body is None else orjson.dumps(body),
            params=dict(params or {}),
            headers={"Content-Type": content_type},
        ) as response:
            raw = await response.read()
            if response.status >= 400:
                message = raw.decode(errors="replace")
                with contextlib.suppress(orjson.JSONDecodeError):
                    message = str(orjson.loads(raw).get("message") or message)
                raise KubeError(response.status, message)
            return orjson.loads(raw) if raw else None

    async def text(self, path: str) -> str:
        """A plain-text answer (e.g. the API server's ``/metrics``)."""
        async with self.session.get(self.credentials.server + path) as response:
            body = await response.text()
            if response.status >= 400:
                raise KubeError(response.status, body[:500])
            return body

    async def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.request("GET", path_of(resource, namespace, name))
        except KubeError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def list(
        self, resource: str, namespace: str | None = None, *, labels: str = "", limit: int = 0
    ) -> dict[str, Any]:
        """The List object (``items`` and ``metadata.resourceVersion``)."""
        params = {"labelSelector": labels} if labels else {}
        if limit:
            params["limit"] = str(limit)
        found: dict[str, Any] = await self.request("GET", path_of(resource, namespace), params=params)
        return found

    async def create(self, resource: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.request("POST", path_of(resource, namespace), dict(body))
        return created

    async def ensure(self, resource: str, namespace: str | None, body: Mapping[str, Any]) -> None:
        """Create unless it exists (409 is fine)."""
        try:
            await self.create(resource, namespace, body)
        except KubeError as exc:
            if exc.status != 409:
                raise

    async def patch_status(self, resource: str, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Merge-patch the status subresource; False when the object is gone."""
        try:
            await self.request(
                "PATCH",
                path_of(resource, namespace, name, "status"),
                {"status": dict(status)},
                content_type="application/merge-patch+json",
            )
        except KubeError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    async def delete_collection(self, resource: str, namespace: str, labels: str) -> None:
        await self.request(
            "DELETE",
            path_of(resource, namespace),
            {"propagationPolicy": "Background"},
            params={"labelSelector": labels},
        )

    async def watch(
        self,
        resource: str,
        handler: WatchHandler,
        stop: asyncio.Event,
        *,
        labels: str = "",
        fields: str = "",
        synced: asyncio.Event | None = None,
    ) -> None:
        """List ``resource`` in every namespace (each item as an ``ADDED`` event), then watch from
        the list's version until ``stop`` is set; list again after a 410 or a broken stream.
        ``synced`` is set after the first list has been handled."""
        base = {k: v for k, v in (("labelSelector", labels), ("fieldSelector", fields)) if v}
        while not stop.is_set():
            try:
                listing = await self.request("GET", path_of(resource), params=base)
                for item in listing.get("items") or []:
                    await _call(handler, "ADDED", item)
                if synced is not None:
                    synced.set()
                version = str(listing["metadata"]["resourceVersion"])
                while not stop.is_set():
                    version = await self._watch_once(resource, base, version, handler, stop)
            except _Gone:
                continue
            except (aiohttp.ClientError, TimeoutError, KubeError, OSError) as exc:
                log.warning("watch %s: %s; listing again", resource, exc)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), 1.0)

    async def _watch_once(
        self,
        resource: str,
        base: Mapping[str, str],
        version: str,
        handler: WatchHandler,
        stop: asyncio.Event,
    ) -> str:
        params = {
            **base,
            "watch": "1",
            "resourceVersion": version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(WATCH_TIMEOUT_S),
        }
        timeout = aiohttp.ClientTimeout(total=None, sock_read=WATCH_TIMEOUT_S + 30)
        async with self.session.get(
            self.credentials.server + path_of(resource), params=params, timeout=timeout
        ) as response:
            if response.status == 410:
                raise _Gone
            if response.status >= 400:
                raise KubeError(response.status, (await response.read()).decode(errors="replace"))
            reader = asyncio.ensure_future(_lines(response, handler))
            stopper = asyncio.ensure_future(stop.wait())
            try:
                done, _ = await asyncio.wait({reader, stopper}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                for task in (reader, stopper):
                    if not task.done():
                        task.cancel()
                        with contextlib.suppress(asyncio.CancelledError):
                            await task
            if reader in done:
                latest = reader.result()
                return latest or version
            return version


class _Gone(Exception):
    """The watch's resourceVersion is too old: list again."""


async def _call(handler: WatchHandler, kind: str, item: dict[str, Any]) -> None:
    result = handler(kind, item)
    if result is not None:
        await result


async def _lines(response: aiohttp.ClientResponse, handler: WatchHandler) -> str:
    """Hand each watch event to ``handler``; returns the last resourceVersion seen."""
    latest = ""
    buffer = b""
    async for chunk in response.content.iter_any():  # objects may be longer than aiohttp's line limit
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            if line.strip():
                latest = await _event(line, handler) or latest
    return latest


async def _event(line: bytes, handler: WatchHandler) -> str:
    """One watch event: to ``handler`` (bookmarks only move the version); its resourceVersion."""
    event = orjson.loads(line)
    kind = str(event.get("type"))
    obj = event.get("object") or {}
    if kind == "ERROR":
        if obj.get("code") == 410:
            raise _Gone
        raise KubeError(int(obj.get("code") or 500), str(obj.get("message")))
    if kind != "BOOKMARK":
        await _call(handler, kind, obj)
    return str((obj.get("metadata") or {}).get("resourceVersion") or "")
