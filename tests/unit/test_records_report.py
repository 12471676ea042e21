"""ReportDocument: the one typed definition of report.json — its schema, its versions, its numbers."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from kubejury.records import report
from kubejury.records.report import (
    SCHEMA_PATH,
    ComparisonCell,
    ModelEntry,
    ReportDocument,
    ReportError,
    SeriesSection,
    TierRule,
    report_schema,
    schema_text,
)

FIXTURE = Path(__file__).parent / "data" / "report" / "small_report.json"


@pytest.fixture
def stored() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return data


def _validate(document: dict[str, Any]) -> None:
    jsonschema.validate(document, report_schema(), cls=jsonschema.Draft202012Validator)


def test_the_committed_report_schema_is_the_one_the_model_generates() -> None:
    """Regenerate with ``python -m kubejury.records.report --schema --write`` when this fails."""
    assert SCHEMA_PATH.read_text(encoding="utf-8") == schema_text()


def test_the_schema_command_prints_the_schema(capsys: pytest.CaptureFixture[str]) -> None:
    assert report.main(["--schema"]) == 0
    assert capsys.readouterr().out == schema_text()


def test_a_stored_version_1_report_reads_back_to_the_same_keys_and_values(stored: dict[str, Any]) -> None:
    written = ReportDocument.read(stored).to_json()
    # Reports written before the power block, the mean difference and the equivalence comparisons
    # existed lack only those three.
    expected = copy.deepcopy(stored)
    for series in expected["series"].values():
        series["power"] = None
        series["comparisons"] = []
    expected["series_comparison"]["mean_delta"] = {}
    assert written == expected
    assert json.dumps(written["series"]["t0"]["models"]) == json.dumps(stored["series"]["t0"]["models"])
    _validate(stored)


def test_a_report_from_a_newer_kubejury_is_refused_naming_schema_version(stored: dict[str, Any]) -> None:
    stored["schema_version"] = 2
    with pytest.raises(ReportError, match=r"schema_version: report version 2 is newer"):
        ReportDocument.read(stored)


def test_a_layout_no_kubejury_wrote_is_refused_naming_schema_version(stored: dict[str, Any]) -> None:
    stored["schema_version"] = 0
    with pytest.raises(ReportError, match=r"schema_version: no report layout 0 exists"):
        ReportDocument.read(stored)
    stored["schema_version"] = "1"
    with pytest.raises(ReportError, match=r"schema_version: must be a whole number"):
        ReportDocument.read(stored)


def test_an_older_layout_is_migrated_step_by_step_before_its_fields_are_read(
    stored: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    def rename_generated(document: dict[str, Any]) -> dict[str, Any]:
        moved = dict(document)
        moved["generated_at"] = moved.pop("generated")
        return moved

    monkeypatch.setitem(report.MIGRATIONS, 0, rename_generated)
    old = dict(stored)
    old["schema_version"] = 0
    old["generated"] = old.pop("generated_at")
    document = ReportDocument.read(old)
    assert document.schema_version == 1
    assert document.generated_at == stored["generated_at"]


def test_a_field_of_the_wrong_type_is_an_error_naming_its_path(stored: dict[str, Any]) -> None:
    stored["series"]["t0"]["models"]["alpha-27b"]["weighted"] = "high"
    with pytest.raises(ReportError, match=r"^report\.json\.series\.t0\.models\.alpha-27b\.weighted: "):
        ReportDocument.read(stored)


def test_a_level_key_that_is_not_a_level_is_refused_by_the_model_and_the_schema(
    stored: dict[str, Any],
) -> None:
    stored["series"]["t0"]["models"]["alpha-27b"]["levels"]["zero"] = 1.0
    with pytest.raises(ReportError, match=r"levels\.zero"):
        ReportDocument.read(stored)
    with pytest.raises(jsonschema.ValidationError, match="zero"):
        _validate(stored)


def test_keys_added_by_a_later_version_1_are_read_past_and_valid_but_refused_when_built(
    stored: dict[str, Any],
) -> None:
    """Adding a key keeps the schema version (docs/report-schema.md), so readers and the schema
    accept one; the writer's own models refuse a key they do not declare."""
    stored["series"]["t0"]["models"]["alpha-27b"]["written_by_a_later_kubejury"] = 1
    entry = ReportDocument.read(stored).to_json()["series"]["t0"]["models"]["alpha-27b"]
    assert "written_by_a_later_kubejury" not in entry and "weighted" in entry
    _validate(stored)
    with pytest.raises(ValueError, match="written_by_a_later_kubejury"):
        ModelEntry.model_validate({"written_by_a_later_kubejury": 1})


def test_numbers_are_rounded_undefined_ones_are_null_and_integers_stay_integers() -> None:
    cell = ComparisonCell(weighted=np.float64(7.123456), delta=math.inf)
    assert cell.model_dump(mode="json") == {"weighted": 7.1235, "delta": None}
    rule = TierRule(tier="S", min_weighted=9, max_degradation=np.float64(-0.00001))
    dumped = rule.model_dump(mode="json")
    assert dumped["min_weighted"] == 9 and isinstance(dumped["min_weighted"], int)
    assert json.dumps(dumped["max_degradation"]) == "0.0"
    with pytest.raises(ValueError, match="not true/false"):
        ComparisonCell(weighted=True)


def test_the_optional_sections_are_left_out_when_absent_and_not_required_by_the_schema() -> None:
    document = ReportDocument(
        generated_at="2026-01-01T00:00:00Z",
        kubejury_version="0.0.0",
        primary_series="s",
        series={"s": SeriesSection()},
    )
    plain = document.to_json()
    assert "provenance" not in plain and "gpu_usage" not in plain
    required = set(report_schema()["required"])
    assert {"schema_version", "series", "series_comparison"} <= required
    assert not {"provenance", "gpu_usage"} & required


def test_the_schema_requires_every_key_the_writer_always_writes(stored: dict[str, Any]) -> None:
    model = stored["series"]["t0"]["models"]["alpha-27b"]
    del model["weighted_ci95"]
    with pytest.raises(jsonschema.ValidationError, match="weighted_ci95"):
        _validate(stored)
    assert ReportDocument.read(stored).series["t0"].models["alpha-27b"].weighted_ci95 is None


def test_a_partial_document_reads_with_absent_values_as_none() -> None:
    document = ReportDocument.read({"series": {"p": {"models": {"a": {"weighted": 7.0}}}}})
    entry = document.series["p"].models["a"]
    assert (entry.rank, entry.weighted, entry.tier, entry.weighted_ci95) == (None, 7.0, None, None)
    assert document.series["p"].judges is None and document.series["p"].selection is None


# -- the operator's read of report.json (kubejury_operator.run_storage) ---------------------------


def _summary_of(tmp_path: Path, document: dict[str, Any]) -> dict[str, Any] | None:
    from factories import build_evalrun
    from kubejury.config.spec import parse_evalrun
    from kubejury.files.storage import LocalStorage
    from kubejury_operator import run_storage
    from kubejury_operator.vocabulary import RunRef

    LocalStorage(tmp_path / "evals" / "r-01234567").write_bytes(
        "r/report/report.json", json.dumps(document).encode()
    )
    evalrun = parse_evalrun(build_evalrun(storage={"uri": tmp_path.as_uri()}))
    _progress, summary = run_storage.read_progress_and_summary(
        evalrun, RunRef("r", "evals", "0123456789ab"), ("t0",), None, True
    )
    return summary


def test_the_operator_summarises_a_stored_report_from_its_typed_primary_series(
    tmp_path: Path, stored: dict[str, Any]
) -> None:
    summary = _summary_of(tmp_path, stored)
    assert summary is not None
    primary = stored["series"][stored["primary_series"]]
    assert [row["model"] for row in summary["ranking"]] == primary["ranking"]
    assert summary["leader"] == primary["ranking"][0]
    assert summary["domainLeaders"] == primary["domain_leaders"]


def test_a_report_with_a_field_of_the_wrong_type_gives_a_summary_that_names_the_field(
    tmp_path: Path, stored: dict[str, Any]
) -> None:
    stored["series"]["t0"]["models"]["alpha-27b"]["weighted"] = "high"
    summary = _summary_of(tmp_path, stored)
    assert summary is not None
    assert summary["ranking"] == [] and summary["primarySeries"] is None
    assert "series.t0.models.alpha-27b.weighted" in summary["note"]
    assert str(summary["reportUri"]).endswith("/r/report/")


def test_the_operator_leaves_the_per_answer_provenance_unread(tmp_path: Path, stored: dict[str, Any]) -> None:
    """The provenance holds one row per answer (most of a large report) and no summary number."""
    stored["provenance"] = {"answers": "rows the status summary never needs"}
    summary = _summary_of(tmp_path, stored)
    assert summary is not None and summary["leader"] == stored["series"]["t0"]["ranking"][0]


def test_inputs_name_one_source_where_one_is_meant_and_one_or_more_where_several_are(
    stored: dict[str, Any],
) -> None:
    stored["inputs"]["run"] = "r"  # callers may add keys
    assert ReportDocument.read(stored).inputs["run"] == "r"
    _validate(stored)
    for key, value, problem in (("benchmark", ["a", "b"], "not a list"), ("judgments", None, "not null")):
        broken = copy.deepcopy(stored)
        broken["inputs"][key] = value
        with pytest.raises(ReportError, match=rf"inputs\.{key}: .*{problem}"):
            ReportDocument.read(broken)
        with pytest.raises(jsonschema.ValidationError):
            _validate(broken)


NEVER_IN_A_REPORT: dict[str, tuple[tuple[str | int, ...], Any]] = {
    "a negative answer count": (("series", "t0", "models", "alpha-27b", "n_scored"), -1),
    "an interval of three numbers": (
        ("series", "t0", "models", "alpha-27b", "weighted_ci95"),
        [1.0, 2.0, 3.0],
    ),
    "a probability above one": (("series", "t0", "prob_better", "alpha-27b", "gamma-9b"), 1.5),
    "a rank of zero": (("series", "t0", "models", "alpha-27b", "rank"), 0),
    "a level zero": (("benchmark", "levels"), [0, 1]),
    "a confidence of one": (("config", "confidence"), 1.0),
    "a time without its zone": (("generated_at",), "2026-01-01T00:00:00"),
    "a version 2 layout": (("schema_version",), 2),
    "no series at all": (("series",), {}),
    "a ranking naming a model twice": (("series", "t0", "ranking"), ["alpha-27b", "alpha-27b"]),
}


@pytest.mark.parametrize("case", sorted(NEVER_IN_A_REPORT))
def test_the_schema_rejects_what_report_json_never_holds(stored: dict[str, Any], case: str) -> None:
    path, value = NEVER_IN_A_REPORT[case]
    node: Any = stored
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        _validate(stored)
