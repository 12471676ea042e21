"""kopf's settings for this operator, and how it logs in to the Kubernetes API.

Why this module exists: how kopf itself behaves — the finalizer's name, where it keeps its
progress and diff-base (none: no handler reads a diff), paged lists and server-filtered watches,
the admission webhook's server, a quieter log, the credentials it logs in with and the name it
writes under (the operator's one field manager) — is configuration, not wiring; :mod:`.handlers`
calls these from its start-up and login handlers and stays thin.

The diff base. kopf keeps, per object, the "essence" it last handled (by default a JSON copy of the
spec, labels and annotations in an annotation, 4.3 KB on the study's EvalRun) to tell create,
update and resume apart and to give ``on.update``/``on.field`` handlers their diff. This operator
has none of those: on EvalRuns only a timer, an index, ``on.delete`` (kopf decides deletion from the
deletion timestamp and its finalizer, never from the diff) and the admission webhook. So
:class:`NoDiffBaseStorage` stores nothing and reports every essence as unchanged, and the
annotation is never written; :func:`diff_base_needed` (and its unit test) says when that would stop
being true. ``KUBEJURY_STATUS_FORMAT=full`` (the operator benchmark's "before" design only) keeps
the annotation, as :class:`LeanDiffBaseStorage` wrote it.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from kubejury_operator import watched
from kubejury_operator.gateway import USER_AGENT
from kubejury_operator.status import full_status

FINALIZER = "kubejury.io/finalizer"
# Lists (at start-up, after a watch's 410 Gone) in pages, as client-go's pager does: a cluster
# with thousands of the operator's Jobs is not parsed as one answer.
WATCH_LIST_PAGE_SIZE = 500


def configure_settings(settings: kopf.OperatorSettings, env: Mapping[str, str]) -> None:
    """Persistence, watching, posting and admission settings, from the environment."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubejury.io")
    full = full_status(env)
    settings.persistence.diffbase_storage = (
        LeanDiffBaseStorage(prefix="kubejury.io", key="last-handled-configuration")
        if full
        else NoDiffBaseStorage()
    )
    settings.posting.level = logging.WARNING  # our own Events tell the story; kopf's only for problems
    settings.watching.server_timeout = int(env.get("KUBEJURY_WATCH_TIMEOUT", "300"))
    settings.watching.chunk_size = WATCH_LIST_PAGE_SIZE
    for resource, selector in watched.watch_label_selectors().items():
        settings.watching.label_selectors[resource] = selector
    quiet = logging.getLogger("kopf.objects")
    if not any(isinstance(f, QuietChildEvents) for f in quiet.filters):
        quiet.addFilter(QuietChildEvents())
    configure_admission(settings, env)


class LeanDiffBaseStorage(kopf.AnnotationsDiffBaseStorage):
    """kopf's annotation diff-base storage, with the essence built from the object without its
    status and managed fields. kopf's own ``build`` deep-copies the whole object and then drops
    those parts; an EvalRun's status is most of it, and every status write comes back as an event:
    that copy was a tenth of a busy operator's CPU. Same essence: with field filters that read the
    status (none of ours do), kopf's own path is taken."""

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        if extra_fields:
            return super().build(body=body, extra_fields=extra_fields)
        meta = body.get("metadata") or {}
        lean: Any = {k: v for k, v in body.items() if k not in ("status", "metadata")}
        lean["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        return super().build(body=kopf.Body(lean), extra_fields=extra_fields)


class NoDiffBaseStorage(kopf.DiffBaseStorage):
    """A diff base that is never stored: every object's essence reads as the one last handled, so
    kopf sees no create or update cause (none has a handler here) and never writes its
    last-handled-configuration annotation. Deletion (``on.delete``) does not depend on it."""

    _ESSENCE: Any = kopf.BodyEssence()

    def build(self, *, body: Any, extra_fields: Any = None) -> Any:
        return self._ESSENCE

    def fetch(self, *, body: Any) -> Any:
        return self._ESSENCE

    def store(self, *, body: Any, patch: Any, essence: Any) -> None:
        return None


def diff_base_needed(registry: kopf.OperatorRegistry) -> list[str]:
    """The ids of the registered changing handlers that would need a stored diff base (every one
    but a plain ``on.delete``); empty for this operator, which is why :class:`NoDiffBaseStorage`
    is safe."""
    needing: list[str] = []
    for handler in registry._changing.get_all_handlers():
        reason = getattr(handler.reason, "value", handler.reason)
        if reason != "delete" or getattr(handler, "field", None) is not None:
            needing.append(str(handler.id))
    return needing


class QuietChildEvents(logging.Filter):
    """Drops kopf's "Handler '…-changed' succeeded." line, logged for every event of every child
    (hundreds a second on a busy operator): it says nothing the reconcile's own log does not."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.msg if isinstance(record.msg, str) else ""
        return not (message.startswith("Handler '") and message.endswith("-changed' succeeded."))


def configure_admission(settings: kopf.OperatorSettings, env: Mapping[str, str]) -> None:
    """Serve the validating webhook when ``KUBEJURY_WEBHOOK_PORT`` is set.

    ``KUBEJURY_WEBHOOK_CERT``/``KUBEJURY_WEBHOOK_KEY`` (e.g. from cert-manager) are used when given,
    else kopf generates a self-signed certificate for ``KUBEJURY_WEBHOOK_HOST`` (the Service's DNS
    name). ``KUBEJURY_WEBHOOK_MANAGED`` names a ValidatingWebhookConfiguration kopf keeps in sync
    itself (with the self-signed CA); leave it empty when the Helm chart owns that object.
    """
    port = env.get("KUBEJURY_WEBHOOK_PORT")
    if not port:
        return
    settings.admission.server = kopf.WebhookServer(
        addr=env.get("KUBEJURY_WEBHOOK_ADDR", "0.0.0.0"),
        port=int(port),
        host=env.get("KUBEJURY_WEBHOOK_HOST") or None,
        certfile=env.get("KUBEJURY_WEBHOOK_CERT") or None,
        pkeyfile=env.get("KUBEJURY_WEBHOOK_KEY") or None,
    )
    managed = env.get("KUBEJURY_WEBHOOK_MANAGED")
    if managed:
        settings.admission.managed = managed


def connection_info(env: Mapping[str, str], **kwargs: Any) -> kopf.ConnectionInfo | None:
    """API credentials: ``KUBEJURY_KUBE_SERVER`` (+ ``KUBEJURY_KUBE_TOKEN``) when set (tests, dev),
    else the ``kubernetes`` client's login (the Pod's service account, else the kubeconfig — with
    exec plugins and auth providers, as EKS, GKE and OIDC kubeconfigs need), else kopf's own
    service-account and kubeconfig readers."""
    server = env.get("KUBEJURY_KUBE_SERVER")
    if server:
        return identified(
            kopf.ConnectionInfo(
                server=server,
                token=env.get("KUBEJURY_KUBE_TOKEN") or None,
                insecure=env.get("KUBEJURY_KUBE_INSECURE", "").lower() in ("1", "true", "yes"),
                default_namespace="default",
            ),
            env,
        )
    try:
        info = kopf.login_via_client(**kwargs)
    except kopf.LoginError:
        info = None
    found = info or kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
    return None if found is None else identified(found, env)


class IdentifiedConnectionInfo(kopf.ConnectionInfo):
    """kopf's credentials, with the operator's own User-Agent on kopf's requests: the API server
    names a write's field manager after it, so kopf's writes (the finalizer) and the gateway's
    (:data:`~kubejury_operator.gateway.FIELD_MANAGER`) share one manager instead of ``kopf`` and
    ``Python``."""

    def as_http_headers(self) -> dict[str, str]:
        return {**super().as_http_headers(), "User-Agent": USER_AGENT}


def identified(info: kopf.ConnectionInfo, env: Mapping[str, str]) -> kopf.ConnectionInfo:
    """``info`` as :class:`IdentifiedConnectionInfo` (its credentials unchanged); as it is with
    ``KUBEJURY_STATUS_FORMAT=full`` (kopf's own User-Agent, as before issue 26)."""
    if isinstance(info, IdentifiedConnectionInfo) or full_status(env):
        return info
    values = {f.name: getattr(info, f.name) for f in dataclasses.fields(info)}
    return IdentifiedConnectionInfo(**values)
