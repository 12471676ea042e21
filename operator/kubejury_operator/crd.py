"""The ``evalruns.kubejury.io`` CustomResourceDefinition, generated from the pydantic spec.

The EvalRun's shape is defined once, in :mod:`kubejury.config.spec`. This module turns its JSON schema
into a Kubernetes *structural* schema (every node typed, ``$ref`` inlined, no ``anyOf``/``oneOf``,
``nullable`` for optional fields, OpenAPI v3.0 exclusive bounds, descriptions kept so that
``kubectl explain evalrun.spec.models`` teaches the user) and writes the CRD files that ship in
``crds/`` and in the Helm chart. A unit test fails when the files drift from the models.

Run ``python -m kubejury_operator.crd --write`` after changing the spec, ``--check`` in CI.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from kubejury.config.spec import API_GROUP, API_VERSION, KIND, EvalRunSpec

PLURAL = "evalruns"
SINGULAR = "evalrun"
SHORT_NAMES = ["er"]
CRD_NAME = f"{PLURAL}.{API_GROUP}"
FILE_NAME = f"{CRD_NAME}.yaml"

#: Where the generated CRD lives, relative to the repository root.
OUTPUT_PATHS: tuple[str, ...] = (f"crds/{FILE_NAME}", f"charts/kubejury/crds/{FILE_NAME}")
#: The field reference generated from the same schema (what ``kubectl explain`` shows, on one page).
REFERENCE_PATH = "docs/evalrun-reference.md"

HEADER = (
    "# Generated from kubejury.config.spec by `python -m kubejury_operator.crd --write` (make crds).\n"
    "# Do not edit by hand: tests/unit/test_crd.py fails when this file drifts from the models.\n"
)

#: ``kubectl get evalruns`` columns. The operator writes these status fields:
#: ``status.phase`` (Pending…Succeeded/Failed), ``status.progress`` ("judged/total", e.g. "1234/4608"),
#: ``status.summary.leader`` (top model of the primary series) and ``status.summary.leaderWeighted`` (its W);
#: for a run admitted through Kueue, the reason of its ``Queued`` condition.
PRINTER_COLUMNS: list[dict[str, Any]] = [
    {
        "name": "Phase",
        "type": "string",
        "jsonPath": ".status.phase",
        "description": "Lifecycle phase of the run.",
    },
    {
        "name": "Progress",
        "type": "string",
        "jsonPath": ".status.progress",
        "description": "Work items done / total across generation and judging, e.g. 1234/4608.",
    },
    {
        "name": "Leader",
        "type": "string",
        "jsonPath": ".status.summary.leader",
        "description": "Model ranked first by weighted score W in the primary series.",
    },
    {
        "name": "W",
        "type": "number",
        "format": "float",
        "jsonPath": ".status.summary.leaderWeighted",
        "description": "Weighted score W (0–10) of the leader.",
    },
    {
        "name": "Queued",
        "type": "string",
        "jsonPath": '.status.conditions[?(@.type=="Queued")].reason',
        "description": "Kueue: WaitingForQuota, LocalQueueNotFound or Admitted (empty: the run is not queued).",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

# JSON-schema keywords a Kubernetes structural schema accepts (apiextensions.k8s.io/v1 JSONSchemaProps).
_KEEP = frozenset(
    {
        "type",
        "format",
        "description",
        "properties",
        "required",
        "items",
        "additionalProperties",
        "enum",
        "pattern",
        "minimum",
        "maximum",
        "exclusiveMinimum",
        "exclusiveMaximum",
        "minLength",
        "maxLength",
        "minItems",
        "maxItems",
        "minProperties",
        "maxProperties",
        "nullable",
        "multipleOf",
        "uniqueItems",
    }
)


_FIRST = ("type", "nullable", "description")


class SchemaError(ValueError):
    """The pydantic schema uses a construct a structural CRD schema cannot express."""


def _resolve(node: Mapping[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
    """``node`` with a top-level ``$ref`` replaced by its definition (siblings win)."""
    if "$ref" not in node:
        return dict(node)
    name = str(node["$ref"]).rsplit("/", 1)[-1]
    merged = dict(defs[name])
    for key, value in node.items():
        if key != "$ref":
            merged[key] = value
    return merged


def structural(
    node: Mapping[str, Any], defs: Mapping[str, Any], path: str = "spec", *, keep_defaults: bool = False
) -> dict[str, Any]:
    """Convert one pydantic JSON-schema node into a Kubernetes structural-schema node.

    Defaults are dropped (pydantic applies them; the API server must not store a second copy)
    unless ``keep_defaults`` (for the field reference).
    """
    node = _resolve(node, defs)
    nullable = False
    for key in ("anyOf", "oneOf"):
        if key in node:
            options = [_resolve(option, defs) for option in node[key]]
            non_null = [option for option in options if option.get("type") != "null"]
            if len(non_null) != 1:
                raise SchemaError(
                    f"{path}: {key} with {len(non_null)} non-null options cannot be made structural"
                )
            nullable = nullable or len(non_null) != len(options)
            outer = {k: v for k, v in node.items() if k != key}
            node = {**non_null[0], **outer}
    if "allOf" in node:
        parts = node["allOf"]
        if len(parts) != 1:
            raise SchemaError(f"{path}: allOf with {len(parts)} parts")
        outer = {k: v for k, v in node.items() if k != "allOf"}
        node = {**_resolve(parts[0], defs), **outer}
    if "const" in node:
        node = {**node, "enum": [node["const"]]}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key not in _KEEP and not (keep_defaults and key == "default" and value is not None):
            continue
        if key == "properties":
            out[key] = {
                name: structural(child, defs, f"{path}.{name}", keep_defaults=keep_defaults)
                for name, child in value.items()
            }
        elif key == "items":
            out[key] = structural(value, defs, f"{path}[]", keep_defaults=keep_defaults)
        elif key == "additionalProperties":
            if isinstance(value, Mapping):
                out[key] = structural(value, defs, f"{path}.*", keep_defaults=keep_defaults)
            # ``false`` (unknown fields rejected) is what a structural schema does by pruning, and
            # ``additionalProperties`` may not be combined with ``properties``; ``true`` → preserve.
            elif value is True and "properties" not in node:
                out["x-kubernetes-preserve-unknown-fields"] = True
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            # JSON Schema 2020-12 → OpenAPI 3.0: a bound plus a boolean flag.
            bound = "minimum" if key == "exclusiveMinimum" else "maximum"
            out[bound] = value
            out[key] = True
        else:
            out[key] = copy.deepcopy(value)
    if nullable:
        out["nullable"] = True
    if "type" not in out and "x-kubernetes-preserve-unknown-fields" not in out:
        raise SchemaError(f"{path}: no type (structural schemas need one on every node)")
    first = [key for key in _FIRST if key in out]
    return {key: out[key] for key in [*first, *(k for k in out if k not in _FIRST)]}


def spec_schema(*, keep_defaults: bool = False) -> dict[str, Any]:
    """The structural schema of ``.spec``, from :class:`kubejury.config.spec.EvalRunSpec`."""
    schema = EvalRunSpec.model_json_schema(by_alias=True, mode="validation")
    defs = schema.get("$defs", {})
    return structural(schema, defs, "spec", keep_defaults=keep_defaults)


# The spec is immutable once the run has started (``status.startedAt`` is set when it leaves
# Pending): the API server itself refuses the update, with or without the operator's webhook.
# While Pending, or after an InvalidSpec failure (which never starts), the spec may be edited.
# docs/operator.md ("Changing a run") tells how to extend a started run instead.
SPEC_IMMUTABLE_ONCE_STARTED: dict[str, Any] = {
    "rule": "!has(oldSelf.status) || !has(oldSelf.status.startedAt) || self.spec == oldSelf.spec",
    "message": (
        "spec is immutable once the run has started (status.startedAt is set); to change or extend "
        "the run, create a new EvalRun (docs/operator.md, Changing a run)"
    ),
    "reason": "FieldValueForbidden",
    "fieldPath": ".spec",
}


def spec_edit_refusal(old: Mapping[str, Any] | None, new: Mapping[str, Any]) -> str | None:
    """What :data:`SPEC_IMMUTABLE_ONCE_STARTED` says about an update, in Python: its message when
    ``new`` changes the spec of a run whose stored status has ``startedAt``, else ``None``. The
    webhook applies it too, so a cluster whose CRD predates the rule (Helm does not upgrade CRDs)
    still refuses the edit when the webhook is on."""
    if not old or not (old.get("status") or {}).get("startedAt"):
        return None
    if old.get("spec") == new.get("spec"):
        return None
    return str(SPEC_IMMUTABLE_ONCE_STARTED["message"])


#: The parts of ``status`` stored as atomic maps (issue 26): the API server then records one
#: ``managedFields`` entry per part (``f:placement: {}``) instead of one per leaf — the status
#: entry of a busy study run shrank from 8 KB to a few hundred bytes. Only the operator writes
#: status, always whole parts, so no per-leaf ownership is lost.
ATOMIC_STATUS_PARTS = ("placement", "stages", "gpu", "summary", "reuse", "queue", "budget")


def _atomic_status_parts() -> dict[str, Any]:
    return {
        part: {
            "type": "object",
            "x-kubernetes-preserve-unknown-fields": True,
            "x-kubernetes-map-type": "atomic",
        }
        for part in ATOMIC_STATUS_PARTS
    }


def crd(*, atomic_status: bool = True) -> dict[str, Any]:
    """The full CustomResourceDefinition object. ``atomic_status=False``: the status schema before
    issue 26 (every leaf owned apart), kept only for the operator benchmark's "before" design."""
    open_api = {
        "type": "object",
        "description": (
            "An evaluation of LLMs on a benchmark with a jury of LLM judges: the operator serves each model "
            "on suitable GPUs, runs generation, judging and aggregation Jobs, and writes the summary to status."
        ),
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string", "description": "kubejury.io/v1alpha1"},
            "kind": {"type": "string", "description": "EvalRun"},
            "metadata": {"type": "object"},
            "spec": spec_schema(),
            "status": {
                "type": "object",
                "description": (
                    "Written by the operator: phase, conditions, progress per stage, placement decisions, the "
                    "aggregated summary (ranking, W, D, σ, CI, tiers, report URI) and, for a run that reuses "
                    "earlier runs, the records it copied from each (reuse)."
                ),
                "x-kubernetes-preserve-unknown-fields": True,
                "properties": {
                    "phase": {"type": "string"},
                    "startedAt": {"type": "string", "description": "When the run left Pending."},
                    **(_atomic_status_parts() if atomic_status else {}),
                },
            },
        },
        "x-kubernetes-validations": [copy.deepcopy(SPEC_IMMUTABLE_ONCE_STARTED)],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": CRD_NAME, "labels": {"app.kubernetes.io/name": "kubejury"}},
        "spec": {
            "group": API_GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": PLURAL,
                "singular": SINGULAR,
                "kind": KIND,
                "listKind": f"{KIND}List",
                "shortNames": list(SHORT_NAMES),
                "categories": ["kubejury"],
            },
            "versions": [
                {
                    "name": API_VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": copy.deepcopy(PRINTER_COLUMNS),
                    "schema": {"openAPIV3Schema": open_api},
                }
            ],
        },
    }


def render() -> str:
    """The CRD as the YAML text written to disk."""
    return HEADER + yaml.safe_dump(crd(), sort_keys=False, allow_unicode=True, width=120)


def _type_text(node: Mapping[str, Any]) -> str:
    kind = str(node.get("type", "any"))
    if kind == "array":
        kind = f"[]{_type_text(node.get('items', {}))}"
    elif kind == "object" and isinstance(node.get("additionalProperties"), Mapping):
        kind = f"map[string]{_type_text(node['additionalProperties'])}"
    return kind


def _constraints(node: Mapping[str, Any]) -> str:
    parts = []
    if "enum" in node:
        parts.append("one of " + ", ".join(f"`{v}`" for v in node["enum"]))
    for bound, exclusive, inclusive_sign, strict_sign in (
        ("minimum", "exclusiveMinimum", "≥", ">"),
        ("maximum", "exclusiveMaximum", "≤", "<"),
    ):
        if bound in node:
            sign = strict_sign if node.get(exclusive) is True else inclusive_sign
            parts.append(f"{sign} {node[bound]}")
    if "minItems" in node:
        parts.append(f"at least {node['minItems']} item(s)")
    if "pattern" in node:
        parts.append(f"pattern `{node['pattern']}`")
    return "; ".join(parts)


def _reference_rows(node: Mapping[str, Any], path: str, required: bool) -> list[str]:
    description = " ".join(str(node.get("description", "")).split()).replace("|", "\\|")
    constraints = _constraints(node)
    if constraints:
        description = f"{description} ({constraints})" if description else constraints
    default = json.dumps(node["default"], ensure_ascii=False) if "default" in node else ""
    default = f"`{default}`" if default else ""
    rows = [f"| `{path}` | {_type_text(node)} | {'yes' if required else default} | {description} |"]
    target = node.get("items", node) if node.get("type") == "array" else node
    suffix = "[]" if node.get("type") == "array" else ""
    needed = set(target.get("required", []))
    for name, child in target.get("properties", {}).items():
        rows.extend(_reference_rows(child, f"{path}{suffix}.{name}", name in needed))
    return rows


def render_reference() -> str:
    """Markdown reference of every ``spec`` field: path, type, required, description and limits."""
    lines = [
        "<!-- Generated from kubejury.config.spec by `python -m kubejury_operator.crd --write`; do not edit. -->",
        "# EvalRun field reference",
        "",
        f"`apiVersion: {API_GROUP}/{API_VERSION}`, `kind: {KIND}`. The same text is in the CRD: "
        "`kubectl explain evalrun.spec.models` shows it in a cluster. Names are camelCase; unknown "
        "fields are rejected; `kubejury validate FILE` checks a file as a default chart's admission "
        "would (`--settings` for your cluster's allow-lists, `--local` for a file for `kubejury run`).",
        "",
        "| field | type | required / default | description |",
        "|---|---|---|---|",
        *_reference_rows(spec_schema(keep_defaults=True), "spec", True),
        "",
    ]
    return "\n".join(lines)


def _outputs() -> dict[str, str]:
    crd_text = render()
    outputs = {relative: crd_text for relative in OUTPUT_PATHS}
    outputs[REFERENCE_PATH] = render_reference()
    return outputs


def repo_root() -> Path:
    """The repository root (this file is ``operator/kubejury_operator/crd.py``)."""
    return Path(__file__).resolve().parents[2]


def drifted(root: Path) -> list[Path]:
    """Generated files under ``root`` that are missing or differ from what the models give."""
    stale = []
    for relative, text in _outputs().items():
        path = root / relative
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


def write(root: Path) -> list[Path]:
    """Write every generated file under ``root`` (CRD copies and the field reference)."""
    written = []
    for relative, text in _outputs().items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kubejury_operator.crd", description=__doc__.split("\n")[0]
    )
    action = parser.add_mutually_exclusive_group()
    action.add_argument(
        "--write",
        action="store_true",
        help="write crds/, charts/kubejury/crds/ and docs/evalrun-reference.md",
    )
    action.add_argument("--check", action="store_true", help="exit 1 when the files on disk drift")
    parser.add_argument("--root", type=Path, default=None, help="repository root (default: this checkout)")
    args = parser.parse_args(argv)
    root = args.root or repo_root()
    if args.write:
        for path in write(root):
            print(f"wrote {path}")
        return 0
    if args.check:
        stale = drifted(root)
        for path in stale:
            print(f"out of date: {path} (run: python -m kubejury_operator.crd --write)", file=sys.stderr)
        return 1 if stale else 0
    sys.stdout.write(render())
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
