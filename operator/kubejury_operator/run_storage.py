"""The operator's one door to a run's stored results: read progress and the summary, delete results.

Why this module exists: reading a run's progress records and deleting its results (``cleanupPolicy:
Delete``) must open the *same* storage the same way — the run's URI, endpoint, region, addressing
style and the credentials from its ``storage.credentialsSecretRef``. When each path opened storage
itself, the delete path forgot the credentials and fell back to whatever the operator's own
environment held. :func:`open_run_storage` is the only opener. It opens the run's *own* prefix,
``<spec.storage.uri>/<namespace>/<name>-<uid prefix>/`` (:func:`kubejury_operator.tenancy.run_storage_uri`),
never the root the spec names, so nothing done here can touch another run's files. The functions
here block (S3 calls); the handlers run them in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubejury.config.spec import EvalRun
from kubejury.files.storage import RunLayout, S3Credentials, Storage, open_storage
from kubejury.records.progress import ProgressRecord
from kubejury_operator.manifests import RunRef
from kubejury_operator.observed import ProgressKey, collect_progress, progress_key
from kubejury_operator.status import summary_from_report
from kubejury_operator.tenancy import run_storage_uri

SecretData = Mapping[str, str]  # a Secret's data, decoded


def s3_credentials(secret: SecretData | None) -> S3Credentials | None:
    """Credentials from the ``credentialsSecretRef`` Secret (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, optional ``AWS_SESSION_TOKEN``); ``None`` without both keys."""
    if not secret or not secret.get("AWS_ACCESS_KEY_ID") or not secret.get("AWS_SECRET_ACCESS_KEY"):
        return None
    return S3Credentials(
        secret["AWS_ACCESS_KEY_ID"], secret["AWS_SECRET_ACCESS_KEY"], secret.get("AWS_SESSION_TOKEN")
    )


def open_run_storage(evalrun: EvalRun, ref: RunRef, secret: SecretData | None) -> Storage:
    """The run's own prefix, opened with the run's own credentials (two attempts per call: a
    reconcile that cannot read storage simply tries again on the next tick)."""
    storage = evalrun.spec.storage
    return open_storage(
        run_storage_uri(storage.uri, ref.namespace, ref.name, ref.uid),
        endpoint_url=storage.endpoint_url,
        region=storage.region,
        path_style=storage.use_path_style,
        credentials=s3_credentials(secret),
        max_attempts=2,
    )


def read_progress_and_summary(
    evalrun: EvalRun, ref: RunRef, series: tuple[str, ...], secret: SecretData | None, want_summary: bool
) -> tuple[dict[ProgressKey, ProgressRecord], dict[str, Any] | None]:
    """The stages' progress records and (when the aggregation finished) the report's summary."""
    store = open_run_storage(evalrun, ref, secret)
    layout = RunLayout(ref.name)
    entries: list[tuple[str, str, Mapping[str, Any]]] = []
    for name in series:
        for key in store.list(layout.progress_prefix(name)):
            record = store.read_json_or_none(key) if progress_key(name, key) is not None else None
            if isinstance(record, Mapping):
                entries.append((name, key, record))
    summary = None
    if want_summary:
        report = store.read_json_or_none(f"{layout.report_prefix}/report.json")
        if isinstance(report, Mapping):
            summary = summary_from_report(report, store.uri_for(f"{layout.report_prefix}/"))
    return collect_progress(entries), summary


class ResultsKept(Exception):
    """``cleanupPolicy: Delete`` refused: the run has no credentials of its own for S3."""


def delete_results(evalrun: EvalRun, ref: RunRef, secret: SecretData | None) -> int:
    """Delete everything stored under the run's own prefix; the number of objects deleted.

    On S3 only with the run's own ``credentialsSecretRef``: with the operator's chart-wide
    credentials a tenant could have the operator delete what the tenant itself may not."""
    if evalrun.spec.storage.uri.startswith("s3://") and s3_credentials(secret) is None:
        raise ResultsKept(
            "cleanupPolicy Delete needs spec.storage.credentialsSecretRef for s3:// storage "
            "(the operator does not delete with its own credentials); stored results are kept"
        )
    return open_run_storage(evalrun, ref, secret).delete_prefix("")
