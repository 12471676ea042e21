"""The operator's reads of a run's storage: the endpoint rule, the byte and key caps, links.

Issue 29 §2: the operator signed requests to a tenant's ``spec.storage.endpointUrl`` with the
chart-wide key and read a 600 MB body whole. A real loopback listener records what arrives.
"""

from __future__ import annotations

from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import orjson
import pytest

from factories import build_evalrun
from kubejury.config.spec import EvalRun, parse_evalrun
from kubejury.files.storage import LocalStorage, StorageError
from kubejury_operator import run_storage
from kubejury_operator.vocabulary import RunRef
from loopback_http import LoopbackHTTP

CHART_KEY = "AKIACHARTWIDEKEY0000"
RUN_KEY = "AKIARUNSOWNKEY000000"
REF = RunRef("r", "evals", "0123456789ab")
LISTED = ("https://minio.kubejury-system.svc:9000",)
EMPTY_LISTING = (
    b'<?xml version="1.0" encoding="UTF-8"?>'
    b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
    b"<Name>results</Name><Prefix></Prefix><KeyCount>0</KeyCount><MaxKeys>1000</MaxKeys>"
    b"<IsTruncated>false</IsTruncated></ListBucketResult>"
)


class Recorder(LoopbackHTTP):
    """A loopback HTTP listener that records every request's method, path and headers and
    answers with an empty S3 listing."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, str, dict[str, str]]] = []
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def _record(self) -> None:
                recorder.requests.append((self.command, self.path, dict(self.headers.items())))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.send_response(200)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", str(len(EMPTY_LISTING)))
                self.end_headers()
                self.wfile.write(EMPTY_LISTING)

            do_GET = do_POST = do_PUT = do_HEAD = do_DELETE = _record

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(Handler)

    def authorizations(self) -> list[str]:
        return [headers.get("Authorization", "") for _m, _p, headers in self.requests]


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    server = Recorder()
    try:
        yield server
    finally:
        server.close()


@pytest.fixture
def chart_credentials_in_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's own, chart-wide credentials, as the chart puts them in its environment."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", CHART_KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "chart-secret")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "chart-session-token")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    for name in ("AWS_PROFILE", "KUBEJURY_S3_ENDPOINT", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(name, raising=False)


def s3_run(endpoint: str) -> EvalRun:
    return parse_evalrun(
        build_evalrun(
            storage={
                "uri": "s3://results/runs",
                "endpointUrl": endpoint,
                "credentialsSecretRef": {"name": "run-s3"},
            },
            cleanupPolicy="Delete",
        )
    )


def file_run(root: Path) -> EvalRun:
    return parse_evalrun(build_evalrun(storage={"uri": root.as_uri()}))


RUN_SECRET = {"AWS_ACCESS_KEY_ID": RUN_KEY, "AWS_SECRET_ACCESS_KEY": "run-secret"}


# -- the endpoint rule ----------------------------------------------------------------------------


@pytest.mark.usefixtures("chart_credentials_in_env")
def test_an_unlisted_endpoint_without_the_runs_credentials_gets_no_request_at_all(recorder: Recorder) -> None:
    evalrun = s3_run(recorder.url)
    with pytest.raises(
        run_storage.EndpointNotAllowed, match=r"spec\.storage\.endpointUrl.*credentialsSecretRef"
    ):
        run_storage.read_progress_and_summary(evalrun, REF, ("s",), None, True, allowed_endpoints=LISTED)
    with pytest.raises(run_storage.EndpointNotAllowed):
        run_storage.open_run_storage(evalrun, REF, None, allowed_endpoints=LISTED)
    with pytest.raises(run_storage.ResultsKept, match=r"credentialsSecretRef"):
        run_storage.delete_results(evalrun, REF, None, allowed_endpoints=LISTED)
    assert recorder.requests == []


@pytest.mark.usefixtures("chart_credentials_in_env")
def test_an_unlisted_endpoint_is_read_only_with_the_runs_own_credentials(recorder: Recorder) -> None:
    progress, _summary = run_storage.read_progress_and_summary(
        s3_run(recorder.url), REF, ("s",), RUN_SECRET, False, allowed_endpoints=LISTED
    )
    assert progress == {}
    assert recorder.requests, "the listing was sent"
    assert all(RUN_KEY in auth for auth in recorder.authorizations())
    assert not any(CHART_KEY in str(headers) for _m, _p, headers in recorder.requests)
    assert not any("chart-session-token" in str(headers) for _m, _p, headers in recorder.requests)


@pytest.mark.usefixtures("chart_credentials_in_env")
def test_a_listed_endpoint_may_be_read_with_the_charts_credentials(recorder: Recorder) -> None:
    listed = (recorder.url.upper() + "/",)  # compared as the chart's list is: case and slash aside
    run_storage.read_progress_and_summary(
        s3_run(recorder.url), REF, ("s",), None, False, allowed_endpoints=listed
    )
    assert recorder.requests and all(CHART_KEY in auth for auth in recorder.authorizations())


@pytest.mark.usefixtures("chart_credentials_in_env")
def test_without_the_charts_list_any_endpoint_is_allowed_as_before(recorder: Recorder) -> None:
    run_storage.read_progress_and_summary(s3_run(recorder.url), REF, ("s",), None, False)
    assert recorder.requests


# -- caps on what the operator reads ----------------------------------------------------------------


def _run_store(root: Path) -> LocalStorage:
    return LocalStorage(root / "evals" / "r-01234567")


def test_an_oversized_progress_record_is_refused_naming_it_and_the_cap(tmp_path: Path) -> None:
    _run_store(tmp_path).write_bytes(
        "r/s/progress/generate-qwen.json",
        orjson.dumps({"message": "x" * run_storage.PROGRESS_RECORD_MAX_BYTES}),
    )
    with pytest.raises(
        StorageError, match=rf"generate-qwen\.json is larger than {run_storage.PROGRESS_RECORD_MAX_BYTES}"
    ):
        run_storage.read_progress_and_summary(file_run(tmp_path), REF, ("s",), None, False)


def test_progress_records_beyond_the_total_budget_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_storage, "PROGRESS_MAX_TOTAL_BYTES", 1000)
    store = _run_store(tmp_path)
    for model in ("a", "b", "c"):
        store.write_bytes(f"r/s/progress/generate-{model}.json", orjson.dumps({"message": "x" * 400}))
    with pytest.raises(StorageError, match=r"more than 1000 bytes"):
        run_storage.read_progress_and_summary(file_run(tmp_path), REF, ("s",), None, False)


def test_a_progress_folder_past_the_key_cap_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_storage, "PROGRESS_MAX_KEYS", 3)
    store = _run_store(tmp_path)
    for i in range(4):
        store.write_bytes(f"r/s/progress/junk-{i}.json", b"{}")
    with pytest.raises(StorageError, match=r"more than 3 keys"):
        run_storage.read_progress_and_summary(file_run(tmp_path), REF, ("s",), None, False)


def test_an_oversized_report_gives_a_summary_that_says_so_instead_of_being_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(run_storage, "REPORT_MAX_BYTES", 100)
    _run_store(tmp_path).write_bytes("r/report/report.json", b" " * 200 + b"{}")
    _progress, summary = run_storage.read_progress_and_summary(file_run(tmp_path), REF, ("s",), None, True)
    assert summary is not None
    assert summary["ranking"] == []
    assert "larger than 100 bytes" in summary["note"]
    assert str(summary["reportUri"]).endswith("/r/report/")


def test_the_runs_own_folder_reached_through_a_link_is_refused(tmp_path: Path) -> None:
    """A link planted at ``<root>/<namespace>`` leads into another namespace's runs: refused."""
    victim = tmp_path / "team-b"
    (victim / "r-01234567" / "r").mkdir(parents=True)
    (victim / "r-01234567" / "r" / "keep.json").write_bytes(b"{}")
    (tmp_path / "evals").symlink_to(victim, target_is_directory=True)
    with pytest.raises(StorageError, match="symbolic link"):
        run_storage.delete_results(file_run(tmp_path), REF, None)
    assert (victim / "r-01234567" / "r" / "keep.json").exists()
