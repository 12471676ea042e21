"""The reports people read: report.json (the data), report.md (GitHub) and report.html (plots).

report.json is built from an :class:`~kubejury.report.aggregate.Analysis` (the statistics of
stored judgments, ``aggregate.py``); report.md and report.html are
rendered from the report.json document only, so the three always say the same thing and an old
report.json can be re-rendered. Schema: docs/report-schema.md and ``report.schema.json``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kubejury.files.storage import LocalStorage, Storage
from kubejury.records.gpu_usage import GpuUsage, report_section
from kubejury.records.report import (
    GpuUsageSection,
    Provenance,
    ReportDocument,
    ReuseSection,
    SequentialSection,
)
from kubejury.records.reuse import ReuseDocument
from kubejury.records.reuse import report_section as reuse_report_section
from kubejury.records.sequential import SequentialDocument
from kubejury.records.sequential import report_section as sequential_report_section
from kubejury.records.timestamps import now_time
from kubejury.report.json_report import SCHEMA_VERSION, build_document, build_report, clean, dumps

if TYPE_CHECKING:
    from kubejury.report.aggregate import Analysis

__all__ = ["SCHEMA_VERSION", "build_report", "dumps", "render_all", "render_document", "write_reports"]


def render_document(document: ReportDocument | Mapping[str, Any]) -> dict[str, bytes]:
    """report.json, report.md and report.html bytes from a report.json document (a mapping is read
    as a :class:`ReportDocument` first, so a bad field is named)."""
    from kubejury.report.html import render_html
    from kubejury.report.markdown import render_markdown

    typed = document if isinstance(document, ReportDocument) else ReportDocument.read(document)
    return {
        "report.json": dumps(typed).encode("utf-8"),
        "report.md": render_markdown(typed).encode("utf-8"),
        "report.html": render_html(typed).encode("utf-8"),
    }


def render_all(
    analysis: Analysis,
    provenance: Mapping[str, Any] | None = None,
    gpu_usage: GpuUsage | None = None,
    reuse: ReuseDocument | None = None,
    sequential: SequentialDocument | None = None,
) -> dict[str, bytes]:
    """The three report files of ``analysis``, keyed by file name (``provenance``: see
    :func:`kubejury.provenance.report_provenance`; stored as report.json's ``provenance``;
    ``gpu_usage``: the run's GPU time from the operator, stored as ``gpu_usage`` with GPU-hours
    and W per GPU-hour of the primary series; ``reuse``: what the run copied from earlier runs;
    ``sequential``: a budgeted run's looks, questions used per model and why each stopped)."""
    document = build_document(analysis)
    update: dict[str, Any] = {}
    if reuse is not None:
        update["reuse"] = ReuseSection.model_validate(reuse_report_section(reuse))
    if sequential is not None:
        update["sequential"] = SequentialSection.model_validate(sequential_report_section(sequential))
    if provenance is not None:
        update["provenance"] = Provenance.model_validate(provenance)
    if gpu_usage is not None and gpu_usage.servers:
        section = gpu_usage_section(document, gpu_usage, analysis.generated_at)
        update["gpu_usage"] = GpuUsageSection.model_validate(clean(section))
    return render_document(document.model_copy(update=update) if update else document)


def gpu_usage_section(document: ReportDocument, usage: GpuUsage, now: str) -> dict[str, Any]:
    """report.json's ``gpu_usage``: :func:`kubejury.records.gpu_usage.report_section` with W of the
    primary series (intervals still open are counted up to ``now``, the report's time)."""
    primary = document.series.get(document.primary_series)
    weighted = {name: entry.weighted for name, entry in primary.models.items()} if primary else {}
    return report_section(usage, now or now_time(), weighted, source="EvalRun status.gpu")


def write_reports(
    analysis: Analysis,
    out_dir: str | Path | Storage,
    prefix: str = "",
    provenance: Mapping[str, Any] | None = None,
    gpu_usage: GpuUsage | None = None,
    reuse: ReuseDocument | None = None,
    sequential: SequentialDocument | None = None,
) -> dict[str, str]:
    """Write report.json, report.md and report.html under ``out_dir`` (a directory or a
    :class:`~kubejury.files.storage.Storage`), each atomically (temp file + rename, or one S3 put).

    Returns file name → URI written. ``prefix`` is a key prefix inside a storage (e.g.
    ``"run/series/report/"``).
    """
    storage = out_dir if isinstance(out_dir, Storage) else LocalStorage(Path(out_dir))
    written: dict[str, str] = {}
    for name, data in render_all(analysis, provenance, gpu_usage, reuse, sequential).items():
        key = f"{prefix}{name}"
        storage.write_bytes(key, data)
        written[name] = storage.uri_for(key)
    return written
