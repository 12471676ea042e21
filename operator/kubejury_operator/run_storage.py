"""The operator's one door to a run's stored results: read progress and the summary, delete results.

Why this module exists: reading a run's progress records and deleting its results (``cleanupPolicy:
Delete``) must open the *same* storage the same way — the run's URI, endpoint, region, addressing
style and the credentials from its ``storage.credentialsSecretRef``. When each path opened storage
itself, the delete path forgot the credentials and fell back to whatever the operator's own
environment held. :func:`open_run_storage` is the only opener. It opens the run's *own* prefix,
``<spec.storage.uri>/<namespace>/<name>-<uid prefix>/`` (:func:`kubejury_operator.tenancy.run_storage_uri`),
never the root the spec names, so nothing done here can touch another run's files. The functions
here block (S3 calls); the handlers run them in a thread.

Nothing here trusts what it reads (issue 29, finding 2): the endpoint may be the tenant's, and the
run's own Jobs wrote the objects. So a request to an endpoint the chart does not list is signed
only with the run's own credentials (never the operator's), every object read has a byte cap, a
listing a key cap, a reading a total byte budget, and every S3 request timeouts (connect, read and
a whole-body deadline).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from kubejury.config.spec import EvalRun
from kubejury.errors import InputError
from kubejury.files.storage import RunLayout, S3Credentials, S3Timeouts, Storage, StorageError, open_storage
from kubejury.records.progress import ProgressRecord
from kubejury.records.report import ReportDocument, ReportError
from kubejury.records.reuse import ReuseDocument, ReuseDocumentError
from kubejury.records.run_status import RunSummary
from kubejury.records.sequential import SequentialDocument, SequentialDocumentError, document_key
from kubejury_operator.observed import ProgressKey, collect_progress, progress_key
from kubejury_operator.status import summary_from_report
from kubejury_operator.tenancy import endpoint_listed, run_storage_uri
from kubejury_operator.vocabulary import RunRef

SecretData = Mapping[str, str]  # a Secret's data, decoded

PROGRESS_RECORD_MAX_BYTES = 64 * 1024
"""One progress record: about fifteen scalar fields and a message, under 2 KiB as the stages write
it; 64 KiB leaves room for a long error message and refuses anything else."""

PROGRESS_MAX_KEYS = 10_000
"""Keys in one series' progress folder: one record per stage, model or judge, and shard (50
models × 3 stages × 16 shards is 2,400)."""

PROGRESS_MAX_TOTAL_BYTES = 16 * 1024 * 1024
"""All progress records of one reading together: thousands of real records are a few MiB; without
this budget, many records each under their cap could still add up to gigabytes."""

REPORT_MAX_BYTES = 16 * 1024 * 1024
"""report.json, read for the status summary: its largest part is one provenance row (~250 bytes)
per answer, so 16 MiB holds about 60,000 answers. Parsed, a document this size takes roughly
5-8 times as much memory, which the operator's 512 Mi limit still bears next to its ~340 MiB at a
hundred runs. A larger report stays in storage untouched; the summary then says so."""

REUSE_DOCUMENT_MAX_BYTES = 4 * 1024 * 1024
"""reuse.json: one entry per stage (model or judge × series) with its sources and refusals, a few
hundred bytes each; 4 MiB holds thousands of stages and refuses anything else."""

OPERATOR_S3_TIMEOUTS = S3Timeouts(connect_s=5.0, read_s=15.0, body_s=30.0)
"""The operator waits at most this long per S3 request (two attempts): a slow or hostile endpoint
must not hold one of the handler threads that every run shares."""


class EndpointNotAllowed(Exception):
    """The run names an S3 endpoint the chart does not list and has no credentials of its own: the
    operator sends it nothing (its own credentials are never signed for a tenant's endpoint)."""


def s3_credentials(secret: SecretData | None) -> S3Credentials | None:
    """Credentials from the ``credentialsSecretRef`` Secret (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, optional ``AWS_SESSION_TOKEN``); ``None`` without both keys."""
    if not secret or not secret.get("AWS_ACCESS_KEY_ID") or not secret.get("AWS_SECRET_ACCESS_KEY"):
        return None
    return S3Credentials(
        secret["AWS_ACCESS_KEY_ID"], secret["AWS_SECRET_ACCESS_KEY"], secret.get("AWS_SESSION_TOKEN")
    )


def _credentials_for(
    evalrun: EvalRun, secret: SecretData | None, allowed_endpoints: tuple[str, ...] | None
) -> S3Credentials | None:
    """The run's own credentials; on an endpoint the chart does not list, nothing else."""
    storage = evalrun.spec.storage
    credentials = s3_credentials(secret)
    if (
        storage.uri.startswith("s3://")
        and credentials is None
        and not endpoint_listed(storage.endpoint_url, allowed_endpoints)
    ):
        raise EndpointNotAllowed(
            f"spec.storage.endpointUrl {storage.endpoint_url} is not an endpoint the chart lists "
            "(security.storageEndpoints), so the operator sends requests there only with the run's own "
            "spec.storage.credentialsSecretRef (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY), which is "
            "missing or incomplete; nothing was sent"
        )
    return credentials


def open_run_storage(
    evalrun: EvalRun,
    ref: RunRef,
    secret: SecretData | None,
    *,
    allowed_endpoints: tuple[str, ...] | None = None,
) -> Storage:
    """The run's own prefix, opened with the run's own credentials (two attempts per call: a
    reconcile that cannot read storage simply tries again on the next tick). On disk no symbolic
    link below the spec's root is followed, so a link planted on the volume cannot lead elsewhere."""
    storage = evalrun.spec.storage
    return open_storage(
        run_storage_uri(storage.uri, ref.namespace, ref.name, ref.uid),
        endpoint_url=storage.endpoint_url,
        region=storage.region,
        path_style=storage.use_path_style,
        credentials=_credentials_for(evalrun, secret, allowed_endpoints),
        max_attempts=2,
        timeouts=OPERATOR_S3_TIMEOUTS,
        no_links_below=None if storage.uri.startswith("s3://") else storage.uri,
    )


class _Budget:
    """Bytes left for one reading's progress records."""

    def __init__(self, total: int, source: str) -> None:
        self.left = total
        self.total = total
        self.source = source

    def take(self, data: bytes) -> bytes:
        self.left -= len(data)
        if self.left < 0:
            raise StorageError(
                f"progress records under {self.source} add up to more than {self.total} bytes "
                "(the cap for one reading); not read further"
            )
        return data


def _progress_entries(
    store: Storage, layout: RunLayout, series: tuple[str, ...]
) -> list[tuple[str, str, Mapping[str, Any]]]:
    """``(series, key, record)`` of every progress record the planner reads, within the caps."""
    budget = _Budget(PROGRESS_MAX_TOTAL_BYTES, store.uri)
    entries: list[tuple[str, str, Mapping[str, Any]]] = []
    for name in series:
        for key in store.list(layout.progress_prefix(name), max_keys=PROGRESS_MAX_KEYS):
            if progress_key(name, key) is None:
                continue
            try:
                data = budget.take(store.read_bytes(key, max_bytes=PROGRESS_RECORD_MAX_BYTES))
            except FileNotFoundError:
                continue
            try:
                record = orjson.loads(data)
            except orjson.JSONDecodeError as exc:
                raise InputError(store.uri_for(key), f"not valid JSON: {exc}") from exc
            if isinstance(record, Mapping):
                entries.append((name, key, record))
    return entries


def _summary(store: Storage, layout: RunLayout) -> dict[str, Any] | None:
    """The status summary from report.json, read as a :class:`ReportDocument` without its per-answer
    ``provenance`` (no summary number comes from it, and it is most of a large report). A report over
    :data:`REPORT_MAX_BYTES`, or one that does not read (the message names the field), gives a
    summary that points at the report and says why it has no ranking."""
    report_uri = store.uri_for(f"{layout.report_prefix}/")
    try:
        report = store.read_json_or_none(f"{layout.report_prefix}/report.json", max_bytes=REPORT_MAX_BYTES)
    except StorageError as exc:
        if "larger than" not in str(exc):
            raise
        return _unread_summary(report_uri, str(exc))
    if not isinstance(report, Mapping):
        return None
    try:
        document = ReportDocument.read({key: value for key, value in report.items() if key != "provenance"})
    except ReportError as exc:
        return _unread_summary(report_uri, str(exc))
    return summary_from_report(document, report_uri)


def _unread_summary(report_uri: str, note: str) -> dict[str, Any]:
    return RunSummary(primary_series=None, report_uri=report_uri, note=note).to_json()


def read_progress_and_summary(
    evalrun: EvalRun,
    ref: RunRef,
    series: tuple[str, ...],
    secret: SecretData | None,
    want_summary: bool,
    *,
    allowed_endpoints: tuple[str, ...] | None = None,
) -> tuple[dict[ProgressKey, ProgressRecord], dict[str, Any] | None]:
    """The stages' progress records and (when the aggregation finished) the report's summary."""
    store = open_run_storage(evalrun, ref, secret, allowed_endpoints=allowed_endpoints)
    layout = RunLayout(ref.name)
    entries = _progress_entries(store, layout, series)
    summary = _summary(store, layout) if want_summary else None
    return collect_progress(entries), summary


def read_reuse_document(
    evalrun: EvalRun,
    ref: RunRef,
    secret: SecretData | None,
    *,
    allowed_endpoints: tuple[str, ...] | None = None,
) -> ReuseDocument | None:
    """The run's ``reuse.json`` (:class:`~kubejury.records.reuse.ReuseDocument`), ``None`` while
    there is none. A document that does not read raises
    :class:`~kubejury.records.reuse.ReuseDocumentError` naming the key and the field."""
    store = open_run_storage(evalrun, ref, secret, allowed_endpoints=allowed_endpoints)
    key = RunLayout(ref.name).reuse_key
    try:
        data = store.read_json_or_none(key, max_bytes=REUSE_DOCUMENT_MAX_BYTES)
    except InputError as exc:  # not JSON
        raise ReuseDocumentError(str(exc)) from exc
    except StorageError as exc:
        if "larger than" not in str(exc):
            raise
        raise ReuseDocumentError(f"{store.uri_for(key)}: {exc}") from exc
    if data is None:
        return None
    try:
        return ReuseDocument.from_json(data)
    except ReuseDocumentError as exc:
        raise ReuseDocumentError(f"{store.uri_for(key)}: {exc}") from exc


SEQUENTIAL_DOCUMENT_MAX_BYTES = 4 * 1024 * 1024  # a document per model and pair: far below this


def read_sequential_document(
    evalrun: EvalRun,
    ref: RunRef,
    secret: SecretData | None,
    *,
    allowed_endpoints: tuple[str, ...] | None = None,
) -> SequentialDocument | None:
    """A budgeted run's ``sequential.json`` (:class:`~kubejury.records.sequential.SequentialDocument`)
    as its last look Job stored it; ``None`` before the first look. A document that does not read
    (not JSON, too large, a bad field) raises
    :class:`~kubejury.records.sequential.SequentialDocumentError` naming the key and the field."""
    store = open_run_storage(evalrun, ref, secret, allowed_endpoints=allowed_endpoints)
    key = document_key(RunLayout(ref.name).run)
    try:
        data = store.read_json_or_none(key, max_bytes=SEQUENTIAL_DOCUMENT_MAX_BYTES)
    except InputError as exc:  # not JSON
        raise SequentialDocumentError(str(exc)) from exc
    except StorageError as exc:
        if "larger than" not in str(exc):
            raise
        raise SequentialDocumentError(f"{store.uri_for(key)}: {exc}") from exc
    return None if data is None else SequentialDocument.from_json(data, store.uri_for(key))


class ResultsKept(Exception):
    """``cleanupPolicy: Delete`` refused: the run has no credentials of its own for S3."""


def delete_results(
    evalrun: EvalRun,
    ref: RunRef,
    secret: SecretData | None,
    *,
    allowed_endpoints: tuple[str, ...] | None = None,
) -> int:
    """Delete everything stored under the run's own prefix; the number of objects deleted.

    On S3 only with the run's own ``credentialsSecretRef``: with the operator's chart-wide
    credentials a tenant could have the operator delete what the tenant itself may not."""
    if evalrun.spec.storage.uri.startswith("s3://") and s3_credentials(secret) is None:
        raise ResultsKept(
            "cleanupPolicy Delete needs spec.storage.credentialsSecretRef for s3:// storage "
            "(the operator does not delete with its own credentials); stored results are kept"
        )
    return open_run_storage(evalrun, ref, secret, allowed_endpoints=allowed_endpoints).delete_prefix("")
