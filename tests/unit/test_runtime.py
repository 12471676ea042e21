"""The operator's process-wide state (kubejury_operator.runtime): the API client it hands out."""

from __future__ import annotations

import kopf
import pytest

from kubejury_operator.gateway import ApiCredentials, KubeGateway
from kubejury_operator.runtime import OperatorRuntime
from kubejury_operator.settings import WorkloadSettings
from kubejury_operator.testing import FakeKubeApi

LOOPBACK = ApiCredentials(server="https://127.0.0.1:1")  # never reached: no request is made


def test_no_client_before_kopf_has_logged_in() -> None:
    with pytest.raises(kopf.TemporaryError, match="credentials"):
        OperatorRuntime(settings=WorkloadSettings()).gateway()


async def test_the_client_is_made_once_per_login_and_made_again_for_new_credentials() -> None:
    runtime = OperatorRuntime(settings=WorkloadSettings(), credentials=LOOPBACK)
    first = runtime.gateway()
    assert isinstance(first, KubeGateway) and runtime.gateway() is first
    runtime.credentials = ApiCredentials(server="https://127.0.0.1:2")
    assert runtime.gateway() is not first
    await runtime.close()
    await first.close()


async def test_a_client_given_by_a_test_is_kept_and_closed_with_the_runtime() -> None:
    runtime = OperatorRuntime(settings=WorkloadSettings(), credentials=LOOPBACK)
    fake = FakeKubeApi()
    runtime._gateway = fake
    assert runtime.gateway() is fake
    await runtime.close()
    assert fake.closed
    with pytest.raises(kopf.TemporaryError, match="shutting down"):
        runtime.gateway()


def test_active_runs_are_those_whose_last_reconcile_left_them_unfinished() -> None:
    runtime = OperatorRuntime(settings=WorkloadSettings())
    runtime.memory(("a", "generating")).active = True
    runtime.memory(("a", "judging")).active = True
    runtime.memory(("b", "succeeded"))  # remembered, finished
    assert runtime.active_runs() == 2
    runtime.forget(("a", "judging"))
    assert runtime.active_runs() == 1
