"""``kubejury validate``: exit codes and messages a user sees.

A file is checked as admission checks it: the spec, then the cluster's allow-lists — the chart's
defaults, or ``--settings`` (the cluster's settings ConfigMap) — with admission's own message
(issue 28, section 1); ``--local`` checks a file for ``kubejury run`` on this machine.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from factories import (
    CLUSTER_SETTINGS,
    HOSTILE_SPECS,
    admission_answer,
    benign_run,
    cluster_settings_file,
    hostile_run,
    write_yaml,
)
from kubejury.cli import main
from kubejury_operator import chart_defaults

GOOD = """\
apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata: {name: quick}
spec:
  benchmark: {uri: bench.jsonl}
  models: [{name: tiny, runtime: llamacpp}]
  judges: [{name: judge, runtime: llamacpp, seed: 1}]
"""


def test_valid_file_for_a_local_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "ok.yaml"
    file.write_text(GOOD, encoding="utf-8")
    assert main(["validate", "--local", str(file)]) == 0
    assert "ok" in capsys.readouterr().out


def test_invalid_file_lists_fields(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(GOOD.replace("seed: 1", "seed: 1, quantization: fp8"), encoding="utf-8")
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert "line 7: spec.judges[0].quantization" in err
    assert "vLLM only" in err


def test_an_unknown_quantization_is_named_in_the_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    file = tmp_path / "typo.yaml"
    file.write_text(
        GOOD.replace("runtime: llamacpp}]\n  judges", "runtime: llamacpp, quantization: Q4_K_MM}]\n  judges"),
        encoding="utf-8",
    )
    assert main(["validate", str(file)]) == 2
    err = capsys.readouterr().err
    assert "line 6: spec.models[0].quantization: unknown quantization 'Q4_K_MM'; allowed:" in err
    assert "{" not in err


# ------------------------------------- issue 28, section 1: the policy a cluster's admission applies


def test_validate_passes_a_benign_run_under_the_clusters_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_yaml(tmp_path / "run.yaml", benign_run())
    assert main(["validate", "--settings", str(cluster_settings_file(tmp_path)), str(run)]) == 0
    assert "ok" in capsys.readouterr().out


@pytest.mark.parametrize(("label", "mutate", "field"), HOSTILE_SPECS, ids=[h[0] for h in HOSTILE_SPECS])
def test_validate_refuses_each_hostile_run_under_the_clusters_settings_with_admissions_own_message(
    label: str,
    mutate: Callable[[dict[str, Any]], None],
    field: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    body = hostile_run(mutate)
    run = write_yaml(tmp_path / "run.yaml", body)
    code = main(["validate", "--settings", str(cluster_settings_file(tmp_path)), str(run)])
    captured = capsys.readouterr()
    assert code != 0, label
    assert f"{field}: " in captured.err, captured.err
    assert "add it to the chart value security." in captured.err, captured.err
    assert admission_answer(body, CLUSTER_SETTINGS) in captured.err
    assert "ok" not in captured.out


def test_without_settings_validate_refuses_the_issues_foreign_image_and_flag_as_a_default_install_would(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run()
    body["spec"]["jobs"] = {"image": "docker.io/attacker/anything:latest"}
    body["spec"]["models"][0]["extraArgs"] = ["--trust-remote-code"]
    run = write_yaml(tmp_path / "run.yaml", body)
    assert main(["validate", str(run)]) != 0
    err = capsys.readouterr().err
    assert "spec.jobs.image: image docker.io/attacker/anything:latest is not allowed" in err
    assert "security.allowedJobImages" in err
    assert "spec.models[0].extraArgs[0]: " in err and "security.allowedServerFlags" in err
    assert admission_answer(body, chart_defaults.default_policy_env()) in err


def test_without_settings_validate_applies_the_default_charts_empty_storage_roots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_yaml(tmp_path / "run.yaml", benign_run())
    assert main(["validate", str(run)]) != 0
    assert "spec.storage.uri: " in capsys.readouterr().err


def test_local_checks_a_file_for_kubejury_run_on_this_machine_without_any_cluster_policy(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run()
    body["spec"]["storage"] = {"uri": "runs"}
    body["spec"]["benchmark"] = {"uri": "questions.jsonl"}
    run = write_yaml(tmp_path / "run.yaml", body)
    assert main(["validate", "--local", str(run)]) == 0
    assert "ok" in capsys.readouterr().out


def test_local_and_settings_together_are_refused_by_the_parser(tmp_path: Path) -> None:
    run = write_yaml(tmp_path / "run.yaml", benign_run())
    with pytest.raises(SystemExit) as stopped:
        main(["validate", "--local", "--settings", str(cluster_settings_file(tmp_path)), str(run)])
    assert stopped.value.code == 2


def test_snake_case_keys_do_not_skip_the_clusters_policy_in_validate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run()
    body["spec"]["models"][0]["extra_args"] = ["--trust-remote-code"]
    run = write_yaml(tmp_path / "run.yaml", body)
    assert main(["validate", "--settings", str(cluster_settings_file(tmp_path)), str(run)]) != 0
    assert "spec.models[0].extraArgs[0]: " in capsys.readouterr().err


def test_the_namespace_option_places_a_file_without_one_in_that_namespace_for_its_storage_roots(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = benign_run()
    del body["metadata"]["namespace"]
    run = write_yaml(tmp_path / "run.yaml", body)
    settings = str(cluster_settings_file(tmp_path))
    assert main(["validate", "--settings", settings, "--namespace", "team-a", str(run)]) == 0
    assert main(["validate", "--settings", settings, str(run)]) != 0  # namespace default
    assert "namespace default" in capsys.readouterr().err


# ------------------------------------------------ issue 29, low: bad --settings files are input errors


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"KUBEJURY_ALLOWED_CLAIMS": ["a"', "not valid YAML"),
        ("- a\n- list\n", "ConfigMap"),
        ('{"KUBEJURY_ALLOWED_CLAIMS": "[not json"}', "KUBEJURY_ALLOWED_CLAIMS"),
        ('{"KUBEJURY_ALLOWED_JOB_IMAGES": "{\\"a\\": 1}"}', "KUBEJURY_ALLOWED_JOB_IMAGES"),
    ],
    ids=["bad-json", "not-a-mapping", "variable-not-json", "variable-not-a-list"],
)
def test_a_bad_settings_file_is_an_error_naming_the_file_and_what_is_wrong_not_a_traceback(
    content: str, named: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "broken-settings.json"
    settings.write_text(content, encoding="utf-8")
    run = write_yaml(tmp_path / "run.yaml", benign_run())
    assert main(["validate", "--settings", str(settings), str(run)]) == 2
    err = capsys.readouterr().err
    assert str(settings) in err and named in err, err


def test_a_missing_settings_file_is_an_error_naming_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = write_yaml(tmp_path / "run.yaml", benign_run())
    assert main(["validate", "--settings", str(tmp_path / "nope.yaml"), str(run)]) == 2
    assert f"{tmp_path / 'nope.yaml'}: file not found" in capsys.readouterr().err


def test_settings_without_any_allow_list_apply_none_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    body = hostile_run(HOSTILE_SPECS[0][1])
    run = write_yaml(tmp_path / "run.yaml", body)
    settings = cluster_settings_file(tmp_path, {"KUBEJURY_S3_ENDPOINT": "http://minio.minio:9000"})
    assert main(["validate", "--settings", str(settings), str(run)]) == 0  # as that operator would
    err = capsys.readouterr().err
    assert str(settings) in err and "no KUBEJURY_ALLOWED_* variable" in err


def test_validate_lists_the_pairs_a_run_will_compare_including_the_ones_it_adds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    study = Path(__file__).resolve().parents[2] / "examples" / "evalrun-study.yaml"
    assert main(["validate", "--local", str(study)]) == 0
    said = "compares qwq-32b-q6_k − qwq-32b-q4_k_m for equivalence within ±0.25 W points (spec.comparisons)"
    assert said in capsys.readouterr().out
    two_precisions = GOOD.replace(
        "models: [{name: tiny, runtime: llamacpp}]",
        "models: [{name: q4, runtime: llamacpp, source: hf://org/M-GGUF, quantization: Q4_K_M},"
        " {name: q6, runtime: llamacpp, source: hf://org/M-GGUF, quantization: Q6_K}]",
    )
    file = tmp_path / "pair.yaml"
    file.write_text(two_precisions, encoding="utf-8")
    assert main(["validate", "--local", str(file)]) == 0
    added = "compares q6 − q4 for equivalence within ±0.25 W points (one checkpoint in two precisions, added)"
    assert added in capsys.readouterr().out
