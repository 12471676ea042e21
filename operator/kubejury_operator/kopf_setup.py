"""kopf's settings for this operator, and how it logs in to the Kubernetes API.

Why this module exists: how kopf itself behaves — the finalizer's name, where it keeps its
progress and diff-base (lean, without the status), paged lists and server-filtered watches, the
admission webhook's server, a quieter log, the credentials it logs in with — is configuration, not
wiring; :mod:`.handlers` calls these from its start-up and login handlers and stays thin.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import kopf

from kubejury_operator import watched

FINALIZER = "kubejury.io/finalizer"
# Lists (at start-up, after a watch's 410 Gone) in pages, as client-go's pager does: a cluster
# with thousands of the operator's Jobs is not parsed as one answer.
WATCH_LIST_PAGE_SIZE = 500


def configure_settings(settings: kopf.OperatorSettings, env: Mapping[str, str]) -> None:
    """Persistence, watching, posting and admission settings, from the environment."""
    settings.persistence.finalizer = FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kubejury.io")
    settings.persistence.diffbase_storage = LeanDiffBaseStorage(
        prefix="kubejury.io", key="last-handled-configuration"
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
        return kopf.ConnectionInfo(
            server=server,
            token=env.get("KUBEJURY_KUBE_TOKEN") or None,
            insecure=env.get("KUBEJURY_KUBE_INSECURE", "").lower() in ("1", "true", "yes"),
            default_namespace="default",
        )
    try:
        info = kopf.login_via_client(**kwargs)
    except kopf.LoginError:
        info = None
    return info or kopf.login_with_service_account(**kwargs) or kopf.login_with_kubeconfig(**kwargs)
