"""An in-memory Kubernetes API for unit tests: `FakeKubeApi`, which satisfies `KubeApi`.

Why this module exists: handler, observation and apply tests need a cluster that answers the
operator's verbs, and used to get one by subclassing :class:`~kubejury_operator.gateway.KubeGateway`
and overriding methods (with ``type: ignore`` where the types disagreed). This fake keeps the
gateway's promised semantics — ``create`` answers ``False`` on a name that exists, ``get`` ``None``
when missing, ``patch`` is a JSON merge patch (RFC 7386: ``null`` deletes), ``patch_status`` redacts,
``delete`` answers ``False`` when gone, ``list_objects`` filters by labels — and
tests/unit/test_kube_api_fake.py runs the same contract against the gateway on an emulated API
server, so the two cannot drift apart. Test-side helpers: :meth:`FakeKubeApi.put` seeds objects,
:meth:`~FakeKubeApi.objects` and :meth:`~FakeKubeApi.events` read them back, :attr:`~FakeKubeApi.calls`
records every verb, and :meth:`~FakeKubeApi.fail` makes a verb raise ``GatewayError`` (refusals).
What it leaves out on purpose: the gateway's time-to-live cache of Secrets (a changed Secret is seen
at once here; tests/unit/test_gateway_secret_cache.py covers the cache) and the API server's own
defaulting beyond a ``uid`` and the namespace.
"""

from __future__ import annotations

import base64
import copy
import datetime
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubejury.redact import redact_tree
from kubejury_operator.gateway import RESOURCES, GatewayError, event_manifest
from kubejury_operator.vocabulary import namespace_of

Key = tuple[str, str | None, str]  # kind, namespace (None when cluster-scoped), name


@dataclass(frozen=True)
class Call:
    """One verb the code under test called: which, on what kind, in which namespace, by what name."""

    verb: str
    kind: str
    namespace: str | None = None
    name: str | None = None


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch of ``target`` by ``patch``: objects merge, ``None`` deletes a
    key, anything else (lists included) replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def _labels_match(obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    have = (obj.get("metadata") or {}).get("labels") or {}
    return all(have.get(k) == v for k, v in labels.items())


class FakeKubeApi:
    """The operator's Kubernetes verbs over a dictionary of objects (every answer a deep copy)."""

    def __init__(self, *objects: Mapping[str, Any]) -> None:
        self.store: dict[Key, dict[str, Any]] = {}
        self.calls: list[Call] = []
        self.closed = False
        self._failures: dict[tuple[str, str | None], GatewayError] = {}
        for obj in objects:
            self.put(obj)

    # ---------------------------------------------------------------------- test-side helpers

    def put(self, obj: Mapping[str, Any]) -> dict[str, Any]:
        """Store ``obj`` as the API server would hold it (a ``uid`` added when it has none),
        replacing any object of that name; no call is recorded and no failure applies."""
        stored = copy.deepcopy(dict(obj))
        meta = stored.setdefault("metadata", {})
        if not meta.get("name") or not stored.get("kind"):
            raise ValueError(
                f"metadata.name and kind: required, got {meta.get('name')!r} and {stored.get('kind')!r}"
            )
        meta.setdefault("uid", str(uuid.uuid4()))
        key = self._key(str(stored["kind"]), meta.get("namespace"), str(meta["name"]))
        if key[1] is not None:
            meta["namespace"] = key[1]
        self.store[key] = stored
        return copy.deepcopy(stored)

    def objects(self, kind: str, namespace: str | None = None) -> list[dict[str, Any]]:
        """Every stored object of ``kind`` (in ``namespace`` when given), in creation order."""
        return [
            copy.deepcopy(obj)
            for (k, ns, _), obj in self.store.items()
            if k == kind and (namespace is None or ns == namespace)
        ]

    def events(self, reason: str | None = None) -> list[dict[str, Any]]:
        """The Events posted so far (only those with ``reason`` when given)."""
        return [e for e in self.objects("Event") if reason is None or e.get("reason") == reason]

    def verbs(self) -> list[str]:
        """The verbs called so far, in order."""
        return [call.verb for call in self.calls]

    def fail(
        self,
        verb: str,
        status: int = 403,
        *,
        kind: str | None = None,
        reason: str = "Forbidden",
        message: str = "",
    ) -> None:
        """From now on ``verb`` (on ``kind`` only, when given) raises :class:`GatewayError` with
        that HTTP status and ``Status.reason``, as a refusing API server would."""
        text = message or f"{verb} refused"
        self._failures[(verb, kind)] = GatewayError(status, text, api_message=text, reason=reason)

    def heal(self, verb: str, *, kind: str | None = None) -> None:
        """Undo :meth:`fail` for ``verb`` (and ``kind``)."""
        self._failures.pop((verb, kind), None)

    # ---------------------------------------------------------------------- the KubeApi verbs

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        meta = manifest.get("metadata") or {}
        key = self._call("create", str(manifest.get("kind")), meta.get("namespace"), str(meta.get("name")))
        if key in self.store:
            return False
        self.put(manifest)
        return True

    async def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        obj = self.store.get(self._call("get", kind, namespace, name))
        return None if obj is None else copy.deepcopy(obj)

    async def patch(
        self,
        kind: str,
        namespace: str | None,
        name: str,
        patch: Mapping[str, Any],
        *,
        subresource: str | None = None,
        want_body: bool = True,
    ) -> dict[str, Any] | None:
        return self._merge(self._call("patch", kind, namespace, name), patch, subresource, want_body)

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        self._merge(self._call("scale", kind, namespace, name), {"spec": {"replicas": replicas}}, None, False)

    async def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        key = self._call("patch_status", kind, namespace, name)
        self._merge(key, {"status": redact_tree(dict(status))}, "status", False)

    async def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        return self.store.pop(self._call("delete", kind, namespace, name), None) is not None

    async def list_objects(
        self, kind: str, namespace: str | None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        self._call("list_objects", kind, namespace, None)
        return [obj for obj in self.objects(kind, namespace) if _labels_match(obj, labels or {})]

    async def list_nodes(self) -> list[dict[str, Any]]:
        self._call("list_nodes", "Node", None, None)
        return self.objects("Node")

    async def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        secret = self.store.get(self._call("secret_keys", "Secret", namespace, name))
        if secret is None:
            return None
        return frozenset({*(secret.get("data") or {}), *(secret.get("stringData") or {})})

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        secret = self.store.get(self._call("secret_data", "Secret", namespace, name))
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
        self._call("post_event", "Event", namespace_of(involved), None)
        self.put(event_manifest(involved, type_, reason, message, now=now))

    async def close(self) -> None:
        self.closed = True

    # ---------------------------------------------------------------------- internals

    @staticmethod
    def _key(kind: str, namespace: str | None, name: str) -> Key:
        """Where an object is kept; a kind the gateway cannot address is refused as it would be."""
        resource = RESOURCES.get(kind)
        if resource is None:
            raise KeyError(f"kind: {kind!r} is not one the gateway knows ({', '.join(RESOURCES)})")
        return (kind, (namespace or "default") if resource.namespaced else None, name)

    def _call(self, verb: str, kind: str, namespace: str | None, name: str | None) -> Key:
        """Record the call, raise the failure set for it, and return the object's key."""
        self.calls.append(Call(verb, kind, namespace, name))
        failure = self._failures.get((verb, kind)) or self._failures.get((verb, None))
        if failure is not None:
            raise failure
        return self._key(kind, namespace, name or "")

    def _merge(
        self, key: Key, patch: Mapping[str, Any], subresource: str | None, want_body: bool
    ) -> dict[str, Any] | None:
        """Merge-patch the stored object (only its ``status`` through the status subresource)."""
        obj = self.store.get(key)
        if obj is None:
            return None
        if subresource == "status":
            patch = {"status": patch.get("status")} if "status" in patch else {}
        self.store[key] = merge_patch(obj, patch)
        return copy.deepcopy(self.store[key]) if want_body else {}
