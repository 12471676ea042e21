"""examples/evalrun-add-model.yaml: the study's leaderboard grows by one model (issue 24).

It must be the study's run in every part a record's reuse depends on — else nothing would be
copied — plus one new model and ``reuse.from: [study]``; a valid EvalRun that the CRD's schema
accepts and ``kubejury validate`` passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from factories import write_yaml
from kubejury.cli import main
from kubejury.config import spec

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "evalrun-add-model.yaml"
STUDY = ROOT / "examples" / "evalrun-study.yaml"


def load(path: Path) -> dict[str, Any]:
    return dict(yaml.safe_load(path.read_text(encoding="utf-8")))


def test_it_is_the_study_plus_one_model_reusing_the_study() -> None:
    grown, study = load(EXAMPLE), load(STUDY)
    assert grown["spec"].pop("reuse") == {"from": [study["metadata"]["name"]]}
    old = [m["name"] for m in study["spec"]["models"]]
    assert [m for m in grown["spec"]["models"] if m["name"] in old] == study["spec"]["models"]
    added = [m for m in grown["spec"]["models"] if m["name"] not in old]
    assert len(added) == 1
    grown["spec"]["models"] = study["spec"]["models"]
    assert grown["spec"] == study["spec"]
    assert grown["metadata"]["namespace"] == study["metadata"]["namespace"]  # reuse stays in its namespace
    assert grown["metadata"]["name"] != study["metadata"]["name"]


def test_it_is_a_valid_evalrun_that_fits_the_crd() -> None:
    import jsonschema

    run = spec.EvalRun.model_validate(load(EXAMPLE))
    assert run.spec.reuse.from_runs == ["study"]
    crd = load(ROOT / "crds" / "evalruns.kubejury.io.yaml")
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    validator = jsonschema.Draft4Validator(version["schema"]["openAPIV3Schema"])
    assert [e.message for e in validator.iter_errors(load(EXAMPLE))] == []


def test_kubejury_validate_passes_under_allow_lists_that_admit_the_study(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = {
        "KUBEJURY_ALLOWED_STORAGE_ROOTS": '["s3://kubejury"]',
        "KUBEJURY_ALLOWED_CLAIMS": '["kubejury-model-cache"]',
        "KUBEJURY_ALLOWED_JOB_IMAGES": "[]",
        "KUBEJURY_ALLOWED_SERVER_FLAGS": "[]",
        "KUBEJURY_ALLOWED_STORAGE_ENDPOINTS": "[]",
    }
    path = write_yaml(tmp_path / "settings.yaml", settings)
    assert main(["validate", "--settings", str(path), str(EXAMPLE), str(STUDY)]) == 0
    assert "EvalRun 'study-plus-mistral-small': 17 model(s)" in capsys.readouterr().out
    assert main(["validate", "--local", str(EXAMPLE)]) == 0
