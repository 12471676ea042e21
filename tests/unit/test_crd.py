"""The EvalRun CRD: generated from the pydantic spec, structural, self-explaining, and on disk."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema  # via kubernetes-validate
import kubernetes_validate
import pytest
import yaml

from kubejury.config.spec import parse_evalrun
from kubejury_operator import crd as crd_module
from kubejury_operator.crd import (
    OUTPUT_PATHS,
    REFERENCE_PATH,
    SchemaError,
    crd,
    drifted,
    main,
    render,
    render_reference,
    repo_root,
    structural,
)

FORBIDDEN = {"anyOf", "oneOf", "allOf", "not", "$ref", "$defs", "const", "default", "title", "propertyNames"}


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, child in schema.get("properties", {}).items():
        yield from nodes(child, f"{path}.{name}")
    if isinstance(schema.get("items"), dict):
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}.*")


def version() -> dict[str, Any]:
    versions: list[dict[str, Any]] = crd()["spec"]["versions"]
    assert len(versions) == 1
    return versions[0]


def open_api() -> dict[str, Any]:
    schema: dict[str, Any] = version()["schema"]["openAPIV3Schema"]
    return schema


@pytest.mark.parametrize("relative", OUTPUT_PATHS)
def test_files_on_disk_match_the_models(relative: str) -> None:
    path = repo_root() / relative
    assert path.is_file(), f"{relative} missing: run python -m kubejury_operator.crd --write"
    assert path.read_text(encoding="utf-8") == render(), (
        f"{relative} drifted: run python -m kubejury_operator.crd --write"
    )


def test_field_reference_on_disk_matches_the_models() -> None:
    path = repo_root() / REFERENCE_PATH
    assert path.read_text(encoding="utf-8") == render_reference(), (
        "run python -m kubejury_operator.crd --write"
    )
    text = render_reference()
    assert '| `spec.models[].quantization` | string | `"auto"` |' in text
    assert "| `spec.judges` | []object | yes |" in text
    assert drifted(repo_root()) == []


def test_check_and_write_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--check", "--root", str(tmp_path)]) == 1
    assert "out of date" in capsys.readouterr().err
    assert main(["--write", "--root", str(tmp_path)]) == 0
    assert drifted(tmp_path) == []
    assert main(["--check", "--root", str(tmp_path)]) == 0
    (tmp_path / OUTPUT_PATHS[1]).write_text("stale", encoding="utf-8")
    assert main(["--check", "--root", str(tmp_path)]) == 1


def test_identity_and_shape() -> None:
    obj = crd()
    spec = obj["spec"]
    assert obj["metadata"]["name"] == "evalruns.kubejury.io"
    assert spec["group"] == "kubejury.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["kind"] == "EvalRun"
    assert spec["names"]["shortNames"] == ["er"]
    v = version()
    assert (v["name"], v["served"], v["storage"]) == ("v1alpha1", True, True)
    assert v["subresources"] == {"status": {}}
    status = open_api()["properties"]["status"]
    assert status["type"] == "object" and status["x-kubernetes-preserve-unknown-fields"] is True


def test_printer_columns() -> None:
    columns = {c["name"]: c for c in version()["additionalPrinterColumns"]}
    assert columns["Phase"]["jsonPath"] == ".status.phase"
    assert columns["Progress"]["jsonPath"] == ".status.progress"
    assert columns["Leader"]["jsonPath"] == ".status.summary.leader"
    assert columns["W"]["jsonPath"] == ".status.summary.leaderWeighted"
    assert columns["Age"] == {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}


def test_schema_is_structural() -> None:
    for path, node in nodes(open_api()):
        assert not FORBIDDEN & node.keys(), f"{path}: {FORBIDDEN & node.keys()}"
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), f"{path} has no type"
        assert not ("properties" in node and "additionalProperties" in node), path
        for bound in ("exclusiveMinimum", "exclusiveMaximum"):
            if bound in node:
                assert isinstance(node[bound], bool), f"{path}.{bound} must be a boolean (OpenAPI 3.0)"
        if node.get("type") == "array":
            assert "items" in node, f"{path}: arrays need items"


def test_every_spec_property_has_a_description() -> None:
    missing = [
        path for path, node in nodes(open_api()["properties"]["spec"], ".spec") if not node.get("description")
    ]
    missing = [p for p in missing if not p.endswith("[]") and not p.endswith(".*")]
    assert not missing, missing


def test_explain_key_fields() -> None:
    spec = open_api()["properties"]["spec"]
    model = spec["properties"]["models"]["items"]["properties"]
    for field in (
        "name",
        "source",
        "servedModel",
        "parameters",
        "checkpoint",
        "runtime",
        "quantization",
        "apiKeySecretRef",
    ):
        assert field in model
    assert model["runtime"]["enum"] == ["vllm", "llamacpp", "ollama", "openai"]
    assert model["source"]["nullable"] is True
    weights = spec["properties"]["scoring"]["properties"]["levelWeights"]
    assert weights["type"] == "object" and weights["additionalProperties"] == {"type": "number"}
    assert "sameAs" in spec["properties"]["judges"]["items"]["properties"]
    assert spec["properties"]["judges"]["minItems"] == 1
    assert set(spec["required"]) == {"benchmark", "models", "judges"}


@pytest.mark.parametrize("k8s", ["1.29", kubernetes_validate.latest_version()])
def test_crd_validates_against_kubernetes(k8s: str) -> None:
    kubernetes_validate.validate(yaml.safe_load(render()), k8s, strict=True)


def _as_json_schema(node: Any) -> Any:
    """OpenAPI 3.0 (nullable, boolean exclusive bounds) → JSON Schema, to validate documents here."""
    if isinstance(node, list):
        return [_as_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {k: _as_json_schema(v) for k, v in node.items() if not k.startswith("x-kubernetes")}
    if out.pop("nullable", False):
        out["type"] = [out["type"], "null"]
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
    for bound, plain in (("exclusiveMinimum", "minimum"), ("exclusiveMaximum", "maximum")):
        if out.get(bound) is True:
            out[bound] = out.pop(plain)
        elif out.get(bound) is False:
            del out[bound]
    if "properties" in out and "additionalProperties" not in out:
        out["additionalProperties"] = False  # what pruning + strict field validation give on a server
    return out


def test_a_full_spec_dump_is_accepted_by_the_crd_schema() -> None:
    run = parse_evalrun(
        {
            "metadata": {"name": "study"},
            "spec": {
                "benchmark": {"uri": "s3://b/q.jsonl", "filters": {"levels": [1, 2, 3], "limitPerCell": 2}},
                "models": [
                    {
                        "name": "gpt-oss-120b",
                        "source": "hf://openai/gpt-oss-120b",
                        "checkpoint": "mxfp4",
                        "parameters": "117B",
                    },
                    {
                        "name": "qwen-gguf",
                        "source": "hf://a/b",
                        "runtime": "llamacpp",
                        "quantization": "Q4_K_M",
                    },
                ],
                "judges": [
                    {
                        "name": "j",
                        "runtime": "openai",
                        "source": "https://api.example/v1",
                        "resources": {"gpus": 2},
                    }
                ],
                "modelCache": {"claimName": "models"},
                "hfTokenSecretRef": {"name": "hf", "key": "token"},
            },
        }
    )
    document = run.model_dump(mode="json")
    jsonschema.validate(document, _as_json_schema(open_api()))
    document["spec"]["models"][0]["unknown"] = 1
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(document, _as_json_schema(open_api()))


def test_structural_conversion_rejects_real_unions() -> None:
    with pytest.raises(SchemaError, match="anyOf"):
        structural({"anyOf": [{"type": "string"}, {"type": "integer"}]}, {}, "spec.x")
    with pytest.raises(SchemaError, match="no type"):
        structural({"description": "untyped"}, {}, "spec.y")


def test_module_documents_how_to_regenerate() -> None:
    assert "--write" in (crd_module.__doc__ or "")
