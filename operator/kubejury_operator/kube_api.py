"""What the operator asks of the Kubernetes API, as a Protocol: the seam between decisions and calls.

Why this module exists: the handlers, observation and the apply step need a handful of verbs
(create, get, patch, scale, patch the status, delete, list, read a Secret, post an Event), not an
HTTP client. Typing them against this Protocol lets the real :class:`~kubejury_operator.gateway.KubeGateway`
serve the cluster and the in-memory :class:`~kubejury_operator.testing.FakeKubeApi` serve unit tests,
with no ``type: ignore`` and no subclass that overrides a private method. The semantics each verb
promises are the gateway's (its module docstring); the fake keeps them.
"""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any, Protocol


class KubeApi(Protocol):
    """The Kubernetes verbs the operator uses; every implementation keeps the gateway's semantics."""

    async def create(self, manifest: Mapping[str, Any]) -> bool:
        """Create ``manifest``; ``False`` when an object of that name already exists."""
        ...

    async def get(self, kind: str, namespace: str | None, name: str) -> dict[str, Any] | None:
        """The object, or ``None`` when it does not exist."""
        ...

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
        """JSON merge patch; ``None`` when the object is gone (``{}`` without ``want_body``)."""
        ...

    async def scale(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        """Set ``spec.replicas``."""
        ...

    async def patch_status(self, kind: str, namespace: str, name: str, status: Mapping[str, Any]) -> None:
        """Merge ``status`` into the status subresource, its strings redacted."""
        ...

    async def delete(self, kind: str, namespace: str | None, name: str) -> bool:
        """Delete with background propagation; ``False`` when it was already gone."""
        ...

    async def list_objects(
        self, kind: str, namespace: str | None, labels: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Objects of ``kind`` (in ``namespace``) carrying every label in ``labels``."""
        ...

    async def list_nodes(self) -> list[dict[str, Any]]:
        """Every Node."""
        ...

    async def secret_keys(self, namespace: str, name: str) -> frozenset[str] | None:
        """The keys of a Secret (never its values), or ``None`` when it does not exist."""
        ...

    async def secret_data(self, namespace: str, name: str) -> dict[str, str] | None:
        """Decoded values of a Secret, or ``None`` when it does not exist."""
        ...

    async def post_event(
        self,
        involved: Mapping[str, Any],
        type_: str,
        reason: str,
        message: str,
        *,
        now: datetime.datetime | None = None,
    ) -> None:
        """A core/v1 Event about ``involved``."""
        ...

    async def close(self) -> None:
        """Release connections; the object is not used afterwards."""
        ...
