"""A small async Kubernetes API client for the e2e harness, configured from a kubeconfig file.

Why this module exists: the harness (simulated kubelet, stub servers, ``make operator-up``) and the
tests talk to the real API server as the cluster admin, or as another identity from a kubeconfig;
kopf's and the operator's own clients are part of what is under test, so the harness keeps its
own. It speaks plain REST over aiohttp: get/list/create/patch/delete, the status subresource,
and the error as :class:`ApiError` (status code and the API's message).
"""

from __future__ import annotations

import base64
import ssl
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

CORE = {
    "pods",
    "services",
    "secrets",
    "configmaps",
    "namespaces",
    "nodes",
    "events",
    "serviceaccounts",
    "persistentvolumes",
    "persistentvolumeclaims",
    "endpoints",
}
GROUPS = {
    "deployments": "apps/v1",
    "replicasets": "apps/v1",
    "jobs": "batch/v1",
    "evalruns": "kubejury.io/v1alpha1",
    "endpointslices": "discovery.k8s.io/v1",
    "leases": "coordination.k8s.io/v1",
    "validatingwebhookconfigurations": "admissionregistration.k8s.io/v1",
    # Kueue (issue 25; tests/e2e/test_kueue_e2e.py)
    "localqueues": "kueue.x-k8s.io/v1beta2",
    "clusterqueues": "kueue.x-k8s.io/v1beta2",
    "workloads": "kueue.x-k8s.io/v1beta2",
    "resourceflavors": "kueue.x-k8s.io/v1beta2",
    "workloadpriorityclasses": "kueue.x-k8s.io/v1beta2",
}
CLUSTER_SCOPED = {
    "namespaces",
    "nodes",
    "persistentvolumes",
    "validatingwebhookconfigurations",
    "clusterqueues",
    "resourceflavors",
    "workloadpriorityclasses",
}


class ApiError(Exception):
    def __init__(self, status: int, message: str, body: Mapping[str, Any] | None = None) -> None:
        self.status = status
        self.body = dict(body or {})
        super().__init__(f"{status}: {message}")

    @property
    def message(self) -> str:
        return str(self.body.get("message") or self)


@dataclass(frozen=True)
class KubeConfig:
    """The current context of a kubeconfig: server, CA and the user's credentials."""

    server: str
    ca_data: bytes | None
    token: str | None
    cert_data: bytes | None
    key_data: bytes | None

    @classmethod
    def load(cls, path: str | Path) -> KubeConfig:
        config = yaml.safe_load(Path(path).read_text())
        context_name = config.get("current-context")
        contexts = {c["name"]: c["context"] for c in config.get("contexts") or []}
        context = contexts[context_name] if context_name in contexts else next(iter(contexts.values()))
        cluster = {c["name"]: c["cluster"] for c in config["clusters"]}[context["cluster"]]
        user = {u["name"]: u["user"] for u in config.get("users") or []}.get(context.get("user"), {})

        def data(entry: Mapping[str, Any], key: str) -> bytes | None:
            if entry.get(f"{key}-data"):
                return base64.b64decode(entry[f"{key}-data"])
            if entry.get(key):
                return Path(entry[key]).read_bytes()
            return None

        token = user.get("token") or (
            Path(user["tokenFile"]).read_text().strip() if user.get("tokenFile") else None
        )
        return cls(
            server=str(cluster["server"]).rstrip("/"),
            ca_data=data(cluster, "certificate-authority"),
            token=token,
            cert_data=data(user, "client-certificate"),
            key_data=data(user, "client-key"),
        )

    def ssl_context(self) -> ssl.SSLContext:
        context = ssl.create_default_context()
        if self.ca_data:
            context.load_verify_locations(cadata=self.ca_data.decode())
        if self.cert_data and self.key_data:
            with tempfile.TemporaryDirectory() as tmp:
                cert, key = Path(tmp) / "c.pem", Path(tmp) / "k.pem"
                cert.write_bytes(self.cert_data)
                key.write_bytes(self.key_data)
                context.load_cert_chain(str(cert), str(key))
        return context

    def with_token(self, token: str) -> KubeConfig:
        return KubeConfig(self.server, self.ca_data, token, None, None)

    def to_yaml(self, name: str = "kubejury-e2e") -> str:
        """A kubeconfig file for these credentials (CA and keys inline)."""
        user: dict[str, Any] = {}
        if self.token:
            user["token"] = self.token
        if self.cert_data and self.key_data:
            user["client-certificate-data"] = base64.b64encode(self.cert_data).decode()
            user["client-key-data"] = base64.b64encode(self.key_data).decode()
        cluster: dict[str, Any] = {"server": self.server}
        if self.ca_data:
            cluster["certificate-authority-data"] = base64.b64encode(self.ca_data).decode()
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": name, "cluster": cluster}],
                "users": [{"name": name, "user": user}],
                "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
                "current-context": name,
            }
        )


def path_of(
    resource: str, namespace: str | None = None, name: str | None = None, sub: str | None = None
) -> str:
    """REST path of a resource (plural), optionally in a namespace, one object, a subresource."""
    prefix = "/api/v1" if resource in CORE else f"/apis/{GROUPS[resource]}"
    path = prefix
    if namespace is not None and resource not in CLUSTER_SCOPED:
        path += f"/namespaces/{namespace}"
    path += f"/{resource}"
    if name is not None:
        path += f"/{name}"
    if sub is not None:
        path += f"/{sub}"
    return path


class KubeApi:
    """``async with KubeApi(config) as api:`` — REST calls as the kubeconfig's user."""

    def __init__(self, config: KubeConfig, timeout_s: float = 30.0) -> None:
        self.config = config
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeApi:
        headers = {"Authorization": f"Bearer {self.config.token}"} if self.config.token else {}
        self._session = aiohttp.ClientSession(
            timeout=self._timeout,
            headers=headers,
            connector=aiohttp.TCPConnector(ssl=self.config.ssl_context()),
        )
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._session is not None:
            await self._session.close()

    async def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        params: Mapping[str, str] | None = None,
        content_type: str = "application/json",
    ) -> Any:
        assert self._session is not None, "use KubeApi as an async context manager"
        async with self._session.request(
            method,
            self.config.server + path,
            json=body,
            params=dict(params or {}),
            headers={"Content-Type": content_type},
        ) as response:
            text = await response.text()
            try:
                payload = yaml.safe_load(text) if text else None
            except yaml.YAMLError:
                payload = None
            if response.status >= 400:
                message = payload.get("message") if isinstance(payload, dict) else text
                raise ApiError(response.status, str(message), payload if isinstance(payload, dict) else None)
            return payload

    async def get(self, resource: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = await self.request("GET", path_of(resource, namespace, name))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        return found

    async def list(
        self,
        resource: str,
        namespace: str | None = None,
        *,
        labels: str | None = None,
        fields: str | None = None,
    ) -> list[dict[str, Any]]:
        params = {}
        if labels:
            params["labelSelector"] = labels
        if fields:
            params["fieldSelector"] = fields
        found = await self.request("GET", path_of(resource, namespace), params=params)
        return list(found.get("items") or [])

    async def create(self, resource: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        created: dict[str, Any] = await self.request("POST", path_of(resource, namespace), dict(body))
        return created

    async def apply(self, resource: str, namespace: str | None, body: Mapping[str, Any]) -> dict[str, Any]:
        """Create, or replace the existing object's spec/data (409 → merge patch)."""
        try:
            return await self.create(resource, namespace, body)
        except ApiError as exc:
            if exc.status != 409:
                raise
        name = body["metadata"]["name"]
        patch = {k: v for k, v in body.items() if k not in ("apiVersion", "kind", "metadata", "status")}
        return await self.patch(resource, namespace, name, patch)

    async def patch(
        self,
        resource: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        sub: str | None = None,
    ) -> dict[str, Any]:
        patched: dict[str, Any] = await self.request(
            "PATCH",
            path_of(resource, namespace, name, sub),
            dict(patch),
            content_type="application/merge-patch+json",
        )
        return patched

    async def delete(
        self, resource: str, namespace: str | None, name: str, *, grace_seconds: int | None = None
    ) -> bool:
        body: dict[str, Any] = {"propagationPolicy": "Background"}
        if grace_seconds is not None:
            body["gracePeriodSeconds"] = grace_seconds
        try:
            await self.request("DELETE", path_of(resource, namespace, name), body)
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True
