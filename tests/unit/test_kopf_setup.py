"""kopf's settings for the operator (kubejury_operator.kopf_setup): persistence, watches,
admission server, the quieter log and the login from the environment."""

from __future__ import annotations

import logging
from typing import Any

import kopf

from kubejury_operator import kopf_setup, watched


def test_webhook_server_only_when_a_port_is_set() -> None:
    settings = kopf.OperatorSettings()
    kopf_setup.configure_admission(settings, {})
    assert settings.admission.server is None
    kopf_setup.configure_admission(
        settings, {"KUBEJURY_WEBHOOK_PORT": "9443", "KUBEJURY_WEBHOOK_MANAGED": "kj"}
    )
    assert isinstance(settings.admission.server, kopf.WebhookServer)
    assert settings.admission.server.port == 9443
    assert settings.admission.managed == "kj"


def test_the_api_server_filters_the_childrens_watches_and_lists_come_in_pages() -> None:
    settings = kopf.OperatorSettings()
    kopf_setup.configure_settings(settings, {})
    watching = dict(settings.watching.label_selectors.items())
    assert len(watching) == len(watched.CHILD_INDEXES)
    assert set(watching.values()) == set(watched.watch_label_selectors().values())
    assert settings.watching.chunk_size == kopf_setup.WATCH_LIST_PAGE_SIZE
    assert settings.persistence.finalizer == kopf_setup.FINALIZER


def test_the_watch_timeout_comes_from_the_environment() -> None:
    settings = kopf.OperatorSettings()
    kopf_setup.configure_settings(settings, {"KUBEJURY_WATCH_TIMEOUT": "42"})
    assert settings.watching.server_timeout == 42


def test_a_server_named_in_the_environment_is_logged_in_to_with_its_token() -> None:
    env = {
        "KUBEJURY_KUBE_SERVER": "https://127.0.0.1:6443",
        "KUBEJURY_KUBE_TOKEN": "t",
        "KUBEJURY_KUBE_INSECURE": "yes",
    }
    info = kopf_setup.connection_info(env)
    assert info is not None
    assert (info.server, info.token, info.insecure) == ("https://127.0.0.1:6443", "t", True)


def test_kopfs_line_per_child_event_is_dropped_and_every_other_line_kept() -> None:
    quiet = kopf_setup.QuietChildEvents()

    def record(message: str) -> logging.LogRecord:
        return logging.LogRecord("kopf.objects", logging.INFO, __file__, 1, message, None, None)

    assert not quiet.filter(record("Handler 'jobs-changed' succeeded."))
    assert quiet.filter(record("Handler 'reconcile' succeeded."))
    assert quiet.filter(record("Handler 'jobs-changed' failed with an exception and will try again"))
    assert quiet.filter(record("create Job/kj-r-aggregate"))


def test_the_diff_base_is_kopfs_own_essence_built_without_copying_the_status() -> None:
    raw: Any = {
        "apiVersion": "kubejury.io/v1alpha1",
        "kind": "EvalRun",
        "metadata": {
            "name": "r",
            "namespace": "evals",
            "uid": "u",
            "generation": 2,
            "labels": {"team": "a"},
            "annotations": {"note": "x", "kubejury.io/last-handled-configuration": "{}"},
            "managedFields": [{"manager": "kubectl"}],
        },
        "spec": {"models": [{"name": "m"}]},
        "status": {"phase": "Generating", "stages": {"generation": {"done": 3}}},
    }
    kopfs = kopf.AnnotationsDiffBaseStorage(prefix="kubejury.io", key="last-handled-configuration")
    ours = kopf_setup.LeanDiffBaseStorage(prefix="kubejury.io", key="last-handled-configuration")
    assert ours.build(body=kopf.Body(raw)) == kopfs.build(body=kopf.Body(raw))
    assert "status" not in ours.build(body=kopf.Body(raw))
