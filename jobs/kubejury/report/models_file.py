"""The ``--models M.yaml`` file of ``kubejury report``: model sizes and families, judge relations.

Reports need facts the judgments do not carry: each model's size (for W against size and the
quality-to-size choice), quantization, family and GPU memory, and which judges are (or are
related to) evaluated models (for self-preference). In a cluster run these come from the EvalRun
spec; locally they come from this file. Accepted shapes (YAML or JSON)::

    # a list                           # a mapping name -> facts      # both sections
    - name: Qwen3.5-27B                Qwen3.5-27B:                   models: {...} or [...]
      parameters: 27B                    parameters: 27B              judges:
      quantization: FP8                  family: qwen                   gpt-oss-judge:
      family: qwen                     Gemma-4-26B-A4B: 26B-A4B           sameAs: GPT-OSS-120B
      gpuMemoryGiB: 40                                                    family: gpt-oss

A model's value may be just its size (``"26B-A4B"``). Unknown keys are an error (a typo would
otherwise silently drop a fact); every error names the file, line and field.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from kubejury.errors import InputError
from kubejury.modelinfo import ModelInfo, parse_parameters
from kubejury.report.aggregate import JudgeRelation

MODEL_KEYS = {
    "name": "name",
    "parameters": "parameters",
    "size": "parameters",
    "quantization": "quantization",
    "family": "family",
    "gpuMemoryGiB": "gpu_memory_gib",
    "gpu_memory_gib": "gpu_memory_gib",
}
JUDGE_KEYS = {"name": "name", "sameAs": "same_as", "same_as": "same_as", "family": "family"}


@dataclass(frozen=True)
class ModelsFile:
    models: dict[str, ModelInfo]
    judges: dict[str, JudgeRelation]


@dataclass(frozen=True)
class _Entry:
    name: str | None
    value: Any
    line: int


def _entries(node: yaml.Node, loader: yaml.SafeLoader, source: str, what: str) -> list[_Entry]:
    """The items of a list or mapping node, each with its line number."""
    if isinstance(node, yaml.SequenceNode):
        return [
            _Entry(None, loader.construct_object(item, deep=True), item.start_mark.line + 1)
            for item in node.value
        ]
    if isinstance(node, yaml.MappingNode):
        entries = []
        for key_node, value_node in node.value:
            key = loader.construct_object(key_node, deep=True)
            entries.append(
                _Entry(str(key), loader.construct_object(value_node, deep=True), key_node.start_mark.line + 1)
            )
        return entries
    if isinstance(node, yaml.ScalarNode) and loader.construct_object(node) is None:
        return []
    raise InputError(
        source, f"{what} must be a list or a mapping", location=f"line {node.start_mark.line + 1}"
    )


def _facts(
    entry: _Entry, keys: Mapping[str, str], source: str, what: str, shorthand: str
) -> tuple[str, dict[str, Any]]:
    location = f"line {entry.line}"
    value = entry.value
    if not isinstance(value, Mapping):
        if entry.name is not None and isinstance(value, str | int | float) and not isinstance(value, bool):
            value = {shorthand: value}
        elif entry.name is not None and value is None:
            value = {}
        else:
            raise InputError(source, f"each {what} must be a mapping of facts", location=location)
    facts: dict[str, Any] = {}
    for key, item in value.items():
        if str(key) not in keys:
            allowed = ", ".join(sorted(keys))
            raise InputError(source, f"unknown key (allowed: {allowed})", location=location, field=str(key))
        facts[keys[str(key)]] = item
    name = facts.pop("name", None) if entry.name is None else entry.name
    if entry.name is not None and "name" in facts and facts["name"] != entry.name:
        raise InputError(source, "name differs from the mapping key", location=location, field="name")
    facts.pop("name", None)
    if not isinstance(name, str) or not name.strip():
        raise InputError(source, f"each {what} needs a non-empty name", location=location, field="name")
    for key, item in facts.items():
        if item is not None and key != "gpu_memory_gib" and key != "parameters" and not isinstance(item, str):
            raise InputError(source, "must be a string", location=location, field=key)
    return name.strip(), facts


def _number_or_text(raw: Any) -> str | float | None:
    """A plain count (``120000000000``, or ``"1.2e11"``, which YAML reads as text) or a size label."""
    if raw is None or isinstance(raw, bool):
        return None if raw is None else str(raw)
    if isinstance(raw, int | float) and math.isfinite(raw):
        return float(raw)
    text = str(raw)
    try:
        number = float(text)
    except ValueError:
        return text
    return number if math.isfinite(number) else text


def _model(entry: _Entry, source: str) -> ModelInfo:
    name, facts = _facts(entry, MODEL_KEYS, source, "model", "parameters")
    location = f"line {entry.line}"
    raw = facts.get("parameters")
    try:
        parameters = parse_parameters(_number_or_text(raw))
    except (TypeError, ValueError) as error:
        raise InputError(source, str(error), location=location, field="parameters") from None
    memory = facts.get("gpu_memory_gib")
    if memory is not None:
        if (
            isinstance(memory, bool)
            or not isinstance(memory, int | float)
            or not math.isfinite(memory)
            or memory <= 0
        ):
            raise InputError(
                source, "must be a positive number of GiB", location=location, field="gpuMemoryGiB"
            )
        memory = float(memory)
    return ModelInfo(
        name=name,
        parameters=parameters,
        parameters_label=str(raw) if raw is not None else None,
        quantization=facts.get("quantization"),
        family=facts.get("family"),
        gpu_memory_gib=memory,
    )


def _judge(entry: _Entry, source: str) -> tuple[str, JudgeRelation]:
    name, facts = _facts(entry, JUDGE_KEYS, source, "judge", "same_as")
    return name, JudgeRelation(same_as=facts.get("same_as"), family=facts.get("family"))


def parse_models_file(text: str, source: str) -> ModelsFile:
    """Parse the text of a models file (see the module docstring)."""
    loader = yaml.SafeLoader(text)
    try:
        try:
            root = loader.get_single_node()
        except yaml.YAMLError as error:
            mark = getattr(error, "problem_mark", None)
            location = f"line {mark.line + 1}" if mark is not None else None
            raise InputError(
                source, f"not valid YAML: {getattr(error, 'problem', error)}", location=location
            ) from None
        if root is None:
            raise InputError(source, "the models file is empty")
        model_node: yaml.Node | None = root
        judge_node: yaml.Node | None = None
        if isinstance(root, yaml.MappingNode):
            keys = {str(loader.construct_object(k)): v for k, v in root.value}
            if set(keys) & {"models", "judges"}:
                extra = sorted(set(keys) - {"models", "judges"})
                if extra:
                    raise InputError(
                        source,
                        "with a 'models' or 'judges' section, no other top-level key is allowed",
                        field=extra[0],
                    )
                model_node = keys.get("models")
                judge_node = keys.get("judges")
        models: dict[str, ModelInfo] = {}
        for entry in _entries(model_node, loader, source, "models") if model_node is not None else []:
            info = _model(entry, source)
            if info.name in models:
                raise InputError(
                    source,
                    f"model {info.name!r} is listed twice",
                    location=f"line {entry.line}",
                    field="name",
                )
            models[info.name] = info
        judges: dict[str, JudgeRelation] = {}
        for entry in _entries(judge_node, loader, source, "judges") if judge_node is not None else []:
            name, relation = _judge(entry, source)
            if name in judges:
                raise InputError(
                    source, f"judge {name!r} is listed twice", location=f"line {entry.line}", field="name"
                )
            judges[name] = relation
    finally:
        loader.dispose()
    return ModelsFile(models, judges)


def load_models_file(path: str | Path) -> ModelsFile:
    source = str(path)
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        raise InputError(source, "models file not found") from None
    except IsADirectoryError:
        raise InputError(source, "is a directory, expected a YAML file") from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise InputError(source, "not UTF-8 text", location=f"line {line}") from None
    return parse_models_file(text, source)
