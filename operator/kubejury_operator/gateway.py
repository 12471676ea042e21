"""The one module that talks to the Kubernetes API.

Why this module exists: every side effect on the cluster goes through :class:`KubeGateway`, so the
planner stays pure, RBAC can be reviewed against one file, and the e2e tests can point the whole
operator at an emulated API server by changing one URL. It is a small aiohttp client (aiohttp is
already kopf's transport) using the credentials kopf's login produced (``kopf.ConnectionInfo``),
or any server URL/token for tests.

Semantics it guarantees on a real cluster, without relying on emulator gaps:

* ``create`` treats HTTP 409 as "already there" (level-triggered reconciles re-send creates);
* ``patch`` is a JSON merge patch (``application/merge-patch+json``); ``scale`` patches
  ``spec.replicas``;
* ``delete`` treats 404 as done and uses ``propagationPolicy: Background`` so Jobs take their Pods;
* ``list`` sends a ``labelSelector`` *and* filters the answer by the same labels, so the result is
  right whether or not the server honours selectors;
* every write names one field manager, :data:`FIELD_MANAGER` (``fieldManager`` and the
  User-Agent, which kopf's own requests send too: :mod:`.kopf_setup`), so an object's
  ``managedFields`` has one entry per subresource the operator writes, not one per HTTP client.
"""

from __future__ import annotations

import datetime
import ssl
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Self

import aiohttp

from kubejury import __version__
from kubejury.records.timestamps import format_time
from kubejury.redact import redact, redact_tree
from kubejury_operator import metrics
from kubejury_operator.lanes import Lane, Lanes
from kubejury_operator.status import FULL_STATUS
from kubejury_operator.vocabulary import API_GROUP, API_VERSION, MANAGED_BY, namespace_of

# How long a Secret that exists is reused before it is read again (see KubeGateway._secret): a
# waiting or running EvalRun then costs about one Secret read per 5 minutes, not one per reconcile.
SECRET_TTL_SECONDS = 300.0
# Requests in flight to the API server at once (HTTP/1.1: one per connection). Measured at a
# hundred busy runs (the scale benchmark, 1 December): with 64 the API server took ten times as long
# per EvalRun status patch (p50 5.7 s against 0.5 s; nearly every patch conflicted once with its
# lagging watch cache and went to etcd twice) and the operator saw its writes no sooner; the queue
# only moved from this process into the API server, where every other client waits in it too.
# Waiting requests go by lane (:mod:`.lanes`): a status patch or a scale before other runs' creates.
MAX_CONNECTIONS = 16
#: The one field manager of every write the operator makes; the API server also derives it from
#: the User-Agent (up to its first "/") of a request that names none, as kopf's do.
FIELD_MANAGER = "kubejury-operator"
USER_AGENT = f"{FIELD_MANAGER}/{__version__}"
#: ``KUBEJURY_STATUS_FORMAT=full`` (the operator benchmark's "before" design only): no field
#: manager named, aiohttp's and kopf's default User-Agents, as before issue 26.
_WRITE_METHODS = frozenset({"POST", "PATCH", "PUT"})


@dataclass(frozen=True)
class Resource:
    """Where a kind lives in the API: path prefix, plural, and whether it is namespaced."""

    prefix: str  # "api/v1" or "apis/<group>/<version>"
    plural: str
    namespaced: bool = True


RESOURCES: dict[str, Resource] = {
    "ConfigMap": Resource("api/v1", "configmaps"),
    "ServiceAccount": Resource("api/v1", "serviceaccounts"),
    "Service": Resource("api/v1", "services"),
    "Secret": Resource("api/v1", "secrets"),
    "Event": Resource("api/v1", "events"),
    "Node": Resource("api/v1", "nodes", namespaced=False),
    "Pod": Resource("api/v1", "pods"),
    "Deployment": Resource("apis/apps/v1", "deployments"),
    "Job": Resource("apis/batch/v1", "jobs"),
    "EvalRun": Resource(f"apis/{API_GROUP}/{API_VERSION}", "evalruns"),
    # Kueue's objects, read only (observe.observe_queue; v1beta2 is Kueue 0.17's storage version)
    "LocalQueue": Resource("apis/kueue.x-k8s.io/v1beta2", "localqueues"),
    "ClusterQueue": Resource("apis/kueue.x-k8s.io/v1beta2", "clusterqueues", namespaced=False),
    "Workload": Resource("apis/kueue.x-k8s.io/v1beta2", "workloads"),
}


class GatewayError(Exception):
    """An API call that failed; ``status`` is the HTTP status (0 when no answer), ``api_message``
    the API server's own ``Status.message`` (or the transport's error), ``reason`` its CamelCase
    ``Status.reason`` (``Forbidden``, ``Invalid``, …; ``Unreachable`` when there was no answer)."""

    def __init__(self, status: int, message: str, *, api_message: str = "", reason: str = "") -> None:
        self.status = status
        self.api_message = api_message or message
        self.reason = reason or ("Unreachable" if status == 0 else "ApiError")
        super().__init__(f"Kubernetes API error {status}: {message}")


def _status_fields(text: str) -> tuple[str, str]:
    """(message, reason) of a ``metav1.Status`` body; the raw text when it is not one."""
    import json

    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500], ""
    if not isinstance(body, dict):
        return text.strip()[:500], ""
    return str(body.get("message") or text.strip()[:500]), str(body.get("reason") or "")


@dataclass(frozen=True)
class ApiCredentials:
    """How to reach the API server (the subset of ``kopf.ConnectionInfo`` the gateway uses)."""

    server: str
    token: str | None = None
    scheme: str | None = None  # "Bearer" by default when a token is given
    username: str | None = None
    password: str | None = None
    ca_path: str | None = None
    ca_data: str | bytes | None = None
    certificate_path: str | None = None
    private_key_path: str | None = None
    insecure: bool = False

    @classmethod
    def from_connection_info(cls, info: Any) -> ApiCredentials:
        """From kopf's ``ConnectionInfo`` (duck-typed)."""

        def path(value: Any) -> str | None:
            return None if value is None else str(value)

        return cls(
            server=str(info.server),
            token=getattr(info, "token", None),
            scheme=getattr(info, "scheme", None),
            username=getattr(info, "username", None),
            password=getattr(info, "password", None),
            ca_path=path(getattr(info, "ca_path", None)),
            ca_data=getattr(info, "ca_data", None),
            certificate_path=path(getattr(info, "certificate_path", None)),
            private_key_path=path(getattr(info, "private_key_path", None)),
            insecure=bool(getattr(info, "insecure", False)),
        )

    def ssl_context(self) -> ssl.SSLContext | bool:
        if not self.server.startswith("https://"):
            return False
        if self.insecure:
            return False
        context = ssl.create_default_context(cafile=self.ca_path)
        if self.ca_data:
            data = self.ca_data.decode() if isinstance(self.ca_data, bytes) else self.ca_data
            if "BEGIN CERTIFICATE" not in data:
                import base64

                data = base64.b64decode(data).decode()
            context.load_verify_locations(cadata=data)
        if self.certificate_path and self.private_key_path:
            context.load_cert_chain(self.certificate_path, self.private_key_path)
        return context

    def headers(self) -> dict[str, str]:
        named = {} if FULL_STATUS else {"User-Agent": USER_AGENT}
        if self.token:
            return {**named, "Authorization": f"{self.scheme or 'Bearer'} {self.token}"}
        return named


def selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _matches(obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


def event_manifest(
    involved: Mapping[str, Any],
    type_: str,
    reason: str,
    message: str,
    *,
    now: datetime.datetime | None = None,
) -> dict[str, Any]:
    """A core/v1 Event about ``involved`` (an object with apiVersion, kind and metadata), its
    message redacted and cut to 1 KiB: what the gateway posts and its in-memory stand-in stores."""
    meta = involved.get("metadata") or {}
    namespace = namespace_of(involved)
    stamp = format_time(now or datetime.datetime.now(datetime.UTC))
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{meta.get('name')}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": involved.get("apiVersion"),
            "kind": involved.get("kind"),
            "name": meta.get("name"),
            "namespace": namespace,
            "uid": meta.get("uid"),
        },
        "type": type_,
        "reason": reason,
        "message": redact(message)[:1024],
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
        "source": {"component": MANAGED_BY},
        "reportingComponent": MANAGED_BY,
        "reportingInstance": MANAGED_BY,
    }


class KubeGateway:
    """Async Kubernetes API client for exactly what the operator does."""

    def __init__(
        self,
        credentials: ApiCredentials,
        *,
        timeout_s: float = 30.0,
        secret_ttl_s: float = SECRET_TTL_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.credentials = credentials
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None
        self._secret_ttl = secret_ttl_s
        self._clock = clock
        self._secrets: dict[tuple[str, str], tuple[float, dict[str, Any]]] = {}
        self._lanes = Lanes(MAX_CONNECTIONS)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            auth = None
            if self.credentials.username and self.credentials.password and not self.credentials.token:
                auth = aiohttp.BasicAuth(self.credentials.username, self.credentials.password)
            self._session = aiohttp.ClientSession(
                base_url=None,
                headers=self.credentials.headers(),
                auth=auth,
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(ssl=self.credentials.ssl_context(), limit=MAX_CONNECTIONS),
            )
        return self._session

    def _url(
        self, kind: str, namespace: str | None, name: str | None = None, subresource: str | None = None
    ) -> str:
        res = RESOURCES[kind]
        url = self.credentials.server.rstrip("/") + "/" + res.prefix
        if res.namespaced and namespace:
            url += f"/namespaces/{namespace}"
        url += f"/{res.plural}"
        if name:
            url += f"/{name}"
        if subresource:
            url += f"/{subresource}"
        return url

    async def _request(
        self,
        method: str,
        url: str,
        *,
        json: Any = None,
        params: Mapping[str, str] | None = None,
        content_type: str | None = None,
        ok_missing: bool = False,
        ok_conflict: bool = False,
        want_body: bool = True,
        lane: Lane = Lane.WORK,
    ) -> dict[str, Any] | None:
        """The answer's JSON object; ``None`` for a 404 with ``ok_missing`` and a 409 with
        ``ok_conflict``; ``{}`` without ``want_body`` (a create's, patch's or delete's answer echoes the
        whole object, which no caller reads: decoding it was a tenth of a busy operator's CPU). It
        waits for a place among the requests in flight in its ``lane`` (:mod:`.lanes`)."""
        asked = time.monotonic()
        async with self._lanes.slot(lane):
            sent = time.monotonic()
            try:
                return await self._send(
                    method, url, json, params, content_type, ok_missing, ok_conflict, want_body
                )
            finally:
                metrics.observe_api_request(lane.name.lower(), method, sent - asked, time.monotonic() - sent)

    async def _send(
        self,
        method: str,
        url: str,
        json: Any,
        params: Mapping[str, str] | None,
        content_type: str | None,
        ok_missing: bool,
        ok_conflict: bool,
        want_body: bool,
    ) -> dict[str, Any] | None:
        headers = {"Content-Type": content_type} if content_type else None
        if method in _WRITE_METHODS and not FULL_STATUS:
            params = {**(params or {}), "fieldManager": FIELD_MANAGER}
        try:
            async with self._client().request(
                method, url, json=json, params=params, headers=headers
            ) as response:
                if response.status == 404 and ok_missing:
                    return None
                if response.status == 409 and ok_conflict:
                    return None
                if response.status >= 400:
                    text = await response.text()
                    api_message, reason = _status_fields(text)
                    raise GatewayError(
                        response.status,
                        f"{method} {url}: {text[:500]}",
                        api_message=api_message,
                        reason=reason,
                    )
                if not want_body:
                    await response.read()
                    return {}
                data = await response.json(content_type=None)
                return data if isinstance(data, dict) else {}
        except aiohttp.ClientError as exc:
            raise GatewayError(
                0, f"{method} {url}: {exc}", api_message=str(exc) or type(exc).__name__
            ) from exc

    # ------------------------------------------------------------------------------ verbs

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create ``manifest``; ``False`` when an object of that name already exists (409)."""
        meta = manifest.get("metadata") or {}
        url = self._url(str(manifest["kind"]), meta.get("namespace"))
        return await self._request("POST", url, json=manifest, ok_conflict=True, want_body=False) is not None

    async def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        return await self._request("GET", self._url(kind, namespace, name), ok_missing=True)

    async def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        want_body: bool = True,
        lane: Lane = Lane.WORK,
    ) -> dict[str, Any] | None:
        """JSON merge patch; ``None`` when the object is gone (``{}`` without ``want_body``)."""
        url = self._url(kind, namespace, name, subresource)
        return await self._request(
            "PATCH",
            url,
            json=patch,
            content_type="application/merge-patch+json",
            ok_missing=True,
            want_body=want_body,
            lane=lane,
        )

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        """A server scaled up or released: ahead of other runs' creates (:mod:`.lanes`)."""
        await self.patch(
            kind, namespace, name, {"spec": {"replicas": replicas}}, want_body=False, lane=Lane.DECISION
        )

    async def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Status is readable by every viewer of the run: its strings are redacted here, the one
        place status is written (a condition may quote an error that echoed a credential)."""
        await self.patch(
            kind,
            namespace,
            name,
            {"status": redact_tree(dict(status))},
            subresource="status",
            want_body=False,
            lane=Lane.DECISION,
        )

    async def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        """Delete (Background propagation); ``False`` when it was already gone."""
        url = self._url(kind, namespace, name)
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
        return await self._request("DELETE", url, json=body, ok_missing=True, want_body=False) is not None

    async def list_objects(
        self, kind: str, namespace: str | None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects of ``kind`` (in ``namespace``) carrying every label in ``labels``."""
        params = {"labelSelector": selector(labels)} if labels else None
        data = await self._request("GET", self._url(kind, namespace), params=params) or {}
        items = [i for i in data.get("items") or [] if isinstance(i, dict)]
        return [i for i in items if _matches(i, labels or {})]

    async def list_nodes(self) -> list[dict[str, Any]]:
        return await self.list_objects("Node", None)

    async def _secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        """A Secret, read at most once per ``secret_ttl_s`` while it exists: the operator may not
        watch Secrets (least privilege), and a run is reconciled every tick, so without this every
        reconcile of every run would ``get`` each Secret it names. A Secret that is missing is
        asked for again on the next call (a run waiting for it starts as soon as it exists); a
        changed one (rotated credentials) is seen within the TTL."""
        key = (namespace, name)
        cached = self._secrets.get(key)
        if cached is not None and self._clock() - cached[0] < self._secret_ttl:
            return cached[1]
        secret = await self.get("Secret", namespace, name)
        if secret is None:
            self._secrets.pop(key, None)
            return None
        self._secrets[key] = (self._clock(), secret)
        return secret

    async def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The keys of a Secret (never its values), or ``None`` when it does not exist."""
        secret = await self._secret(namespace, name)
        if secret is None:
            return None
        return frozenset({*(secret.get("data") or {}), *(secret.get("stringData") or {})})

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """Decoded values of a Secret (used only for the run's storage credentials)."""
        import base64

        secret = await self._secret(namespace, name)
        if secret is None:
            return None
        data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
        data.update(secret.get("stringData") or {})
        return data

    async def post_event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        now: datetime.datetime | None = None,
    ) -> None:
        """A core/v1 Event about ``involved`` (:func:`event_manifest`)."""
        event = event_manifest(involved, type_, reason, message, now=now)
        url = self._url("Event", event["metadata"]["namespace"])
        await self._request("POST", url, json=event)
