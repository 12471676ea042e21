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


def _evalrun(spec: dict[str, Any]) -> Any:
    return kopf.Body({"metadata": {"name": "r", "namespace": "n", "uid": "u"}, "spec": spec})


def test_no_diff_base_is_stored_and_no_spec_change_looks_like_a_create_or_an_update() -> None:
    settings = kopf.OperatorSettings()
    kopf_setup.configure_settings(settings, {})
    storage = settings.persistence.diffbase_storage
    assert isinstance(storage, kopf_setup.NoDiffBaseStorage)
    before, after = _evalrun({"models": [{"name": "a"}]}), _evalrun({"models": [{"name": "b"}]})
    patch = kopf.Patch()
    storage.store(body=after, patch=patch, essence=storage.build(body=after))
    assert not patch  # the last-handled-configuration annotation is never written
    from kopf._cogs.structs import diffs

    # kopf's detect_changing_cause: no essence stored → CREATE; an essence that differs → UPDATE
    old, new = storage.fetch(body=before), storage.build(body=after)
    assert old is not None and not diffs.diff(old, new)


def test_the_before_design_of_the_benchmark_keeps_kopfs_lean_diff_base() -> None:
    settings = kopf.OperatorSettings()
    kopf_setup.configure_settings(settings, {"KUBEJURY_STATUS_FORMAT": "full"})
    assert type(settings.persistence.diffbase_storage) is kopf_setup.LeanDiffBaseStorage


def test_no_handler_of_the_operator_reads_a_diff_and_one_that_would_is_named() -> None:
    from kubejury_operator import handlers

    registry = handlers.register(kopf.OperatorRegistry(), env={})
    assert kopf_setup.diff_base_needed(registry) == []

    @kopf.on.update("kubejury.io", "v1alpha1", "evalruns", id="spec-changed", registry=registry)
    def changed(**_: Any) -> None:
        return None

    assert kopf_setup.diff_base_needed(registry) == ["spec-changed"]


def test_kopfs_own_requests_carry_the_operators_field_manager_as_their_user_agent() -> None:
    from kubejury_operator.gateway import FIELD_MANAGER, USER_AGENT

    info = kopf_setup.connection_info({"KUBEJURY_KUBE_SERVER": "https://k:6443", "KUBEJURY_KUBE_TOKEN": "t"})
    assert info is not None and info.token == "t"
    assert info.as_http_headers() == {"Authorization": "Bearer t", "User-Agent": USER_AGENT}
    assert USER_AGENT.split("/", 1)[0] == FIELD_MANAGER  # what the API server names the manager
    before = kopf_setup.connection_info(
        {"KUBEJURY_KUBE_SERVER": "https://k:6443", "KUBEJURY_STATUS_FORMAT": "full"}
    )
    assert before is not None and "User-Agent" not in before.as_http_headers()
