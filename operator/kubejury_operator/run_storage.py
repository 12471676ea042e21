"""The operator's one door to a run's stored results: read progress and the summary, delete results.

Why this module exists: reading a run's progress records and deleting its results (``cleanupPolicy:
Delete``) must open the *same* storage the same way — the run's URI, endpoint, region, addressing
style and the credentials from its ``storage.credentialsSecretRef``. When each path opened storage
itself, the delete path forgot the credentials and fell back to whatever the operator's own
environment held. :func:`open_run_storage` is the only opener. The functions here block (S3
calls); the handlers run them in a thread.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubejury.config.spec import EvalRun
from kubejury.files.storage import RunLayout, S3Credentials, Storage, open_storage
from kubejury.records.progress import ProgressRecord
from kubejury_operator.observed import ProgressKey, collect_progress, progress_key
from kubejury_operator.status import summary_from_report

SecretData = Mapping[str, str]  # a Secret's data, decoded


def s3_credentials(secret: SecretData | None) -> S3Credentials | None:
    """Credentials from the ``credentialsSecretRef`` Secret (``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY``, optional ``AWS_SESSION_TOKEN``); ``None`` without both keys."""
    if not secret or not secret.get("AWS_ACCESS_KEY_ID") or not secret.get("AWS_SECRET_ACCESS_KEY"):
        return None
    return S3Credentials(
        secret["AWS_ACCESS_KEY_ID"], secret["AWS_SECRET_ACCESS_KEY"], secret.get("AWS_SESSION_TOKEN")
    )


def open_run_storage(evalrun: EvalRun, secret: SecretData | None) -> Storage:
    """The run's storage, opened with the run's own credentials (two attempts per call: a
    reconcile that cannot read storage simply tries again on the next tick)."""
    storage = evalrun.spec.storage
    return open_storage(
        storage.uri,
        endpoint_url=storage.endpoint_url,
        region=storage.region,
        path_style=storage.use_path_style,
        credentials=s3_credentials(secret),
        max_attempts=2,
    )


def read_progress_and_summary(
    evalrun: EvalRun, run_name: str, series: tuple[str, ...], secret: SecretData | None, want_summary: bool
) -> tuple[dict[ProgressKey, ProgressRecord], dict[str, Any] | None]:
    """The stages' progress records and (when the aggregation finished) the report's summary."""
    store = open_run_storage(evalrun, secret)
    layout = RunLayout(run_name)
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


def delete_results(evalrun: EvalRun, run_name: str, secret: SecretData | None) -> int:
    """Delete everything stored under the run's prefix; the number of objects deleted."""
    return open_run_storage(evalrun, secret).delete_prefix(f"{run_name}/")
