"""One way for tests to write an EvalRun: a typed builder whose defaults are a small, valid run.

Why this module exists: tests that hand-wrote whole EvalRun bodies repeated the apiVersion, kind
and a benchmark/models/judges skeleton, and drifted whenever the spec changed. Here the skeleton
is written once; a test states only what it is about::

    build_evalrun(models=[model_entry("qwen", parameters="27B")], storage={"uri": "s3://b/runs"})
    build_evalrun_yaml(name="quick", benchmark="bench.jsonl", models=[model_entry("tiny", runtime="llamacpp")])

Keyword arguments of :func:`evalrun` beyond the named ones are spec fields, spelt as in the CRD
(``cleanupPolicy="Delete"``, ``maxConcurrentModels=2``). Every call returns a fresh object.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any, cast

import kopf
import yaml

API_VERSION = "kubejury.io/v1alpha1"
KIND = "EvalRun"

Entry = dict[str, Any]  # one model or judge, spelt as in the CRD


def model_entry(name: str, source: str | None = None, **fields: Any) -> Entry:
    """A model or judge entry; ``source`` defaults to ``hf://org/<name>`` unless the runtime is
    one that needs none (llamacpp's embedded model)."""
    entry: Entry = {"name": name}
    if source is not None:
        entry["source"] = source
    elif fields.get("runtime") not in ("llamacpp", "openai"):
        entry["source"] = f"hf://org/{name}"
    entry.update(fields)
    return entry


DEFAULT_MODELS: tuple[Entry, ...] = (model_entry("qwen", "hf://Qwen/Qwen3.5-27B", parameters="27B"),)
DEFAULT_JUDGES: tuple[Entry, ...] = (model_entry("judge", "hf://google/gemma-4-31b", parameters="31B"),)


def build_evalrun(
    name: str = "r",
    *,
    namespace: str | None = "evals",
    uid: str | None = None,
    generation: int | None = None,
    benchmark: str | dict[str, Any] = "s3://b/bench.jsonl",
    models: Sequence[Entry] = DEFAULT_MODELS,
    judges: Sequence[Entry] = DEFAULT_JUDGES,
    **spec: Any,
) -> dict[str, Any]:
    """An EvalRun object as the API server would hold it (``namespace=None`` leaves it out, as a
    file a user writes would). ``benchmark`` is its URI, or the whole benchmark object (with
    ``filters``). Other spec fields come as keyword arguments."""
    metadata: dict[str, Any] = {"name": name}
    if namespace is not None:
        metadata["namespace"] = namespace
    if uid is not None:
        metadata["uid"] = uid
    if generation is not None:
        metadata["generation"] = generation
    body: dict[str, Any] = {
        "benchmark": {"uri": benchmark} if isinstance(benchmark, str) else dict(benchmark),
        "models": [dict(m) for m in models],
        "judges": [dict(j) for j in judges],
    }
    body.update(spec)
    return copy.deepcopy({"apiVersion": API_VERSION, "kind": KIND, "metadata": metadata, "spec": body})


def build_evalrun_yaml(name: str = "r", **fields: Any) -> str:
    """The same EvalRun as a YAML file (no namespace unless given)."""
    fields.setdefault("namespace", None)
    return yaml.safe_dump(build_evalrun(name, **fields), sort_keys=False)


def as_kopf_body(obj: dict[str, Any]) -> kopf.Body:
    """An object as kopf hands it to a handler: a read-only view over the raw JSON."""
    return kopf.Body(cast(kopf.RawBody, obj))  # RawBody is a TypedDict of the same JSON object


def taint(key: str, value: str | None = None, effect: str = "NoSchedule") -> dict[str, str]:
    """A Node taint as ``kubectl get node -o json`` prints it (``value`` left out when ``None``)."""
    result = {"key": key, "effect": effect}
    if value is not None:
        result["value"] = value
    return result


def toleration(key: str, value: str | None = None, effect: str = "NoSchedule") -> dict[str, str]:
    """A Pod toleration of that taint: ``Equal`` with a value, ``Exists`` without one."""
    if value is None:
        return {"key": key, "operator": "Exists", "effect": effect}
    return {"key": key, "operator": "Equal", "value": value, "effect": effect}


GPU_TAINT = taint("nvidia.com/gpu", "present")
TEAM_B_TAINT = taint("dedicated", "team-b")
CONTROL_PLANE_TAINT = taint("node-role.kubernetes.io/control-plane")


Mutation = Callable[[dict[str, Any]], None]


def spec_set(path: str, value: Any) -> Mutation:
    """A mutation of an EvalRun body that sets ``spec.<path>`` (dots and ``[i]``, as in the field
    paths admission names)."""

    def mutate(body: dict[str, Any]) -> None:
        parts = path.replace("[", ".").replace("]", "").split(".")
        node: Any = body["spec"]
        for part in parts[:-1]:
            node = node[int(part)] if part.isdigit() else node.setdefault(part, {})
        node[parts[-1]] = value

    return mutate


def chained(*mutations: Mutation) -> Mutation:
    """The mutations applied in turn."""

    def mutate(body: dict[str, Any]) -> None:
        for one in mutations:
            one(body)

    return mutate


#: (label, mutation of a run the chart admits, the field admission must name): what a tenant tried
#: with only the chart's ``evalrun-editor`` role (issues 28 and 29). Admission on the real control
#: plane (tests/e2e/test_tenant_refusals_e2e.py), ``kubejury validate`` and ``kubejury plan
#: --manifests`` must each refuse every one with the same text.
HOSTILE_SPECS: tuple[tuple[str, Mutation, str], ...] = (
    ("foreign-job-image", spec_set("jobs.image", "docker.io/attacker/anything:latest"), "spec.jobs.image"),
    (
        "trust-remote-code",
        spec_set("models[0].extraArgs", ["--trust-remote-code"]),
        "spec.models[0].extraArgs[0]",
    ),
    (
        "flag-with-leading-space",
        spec_set("models[0].extraArgs", [" --trust-remote-code"]),
        "spec.models[0].extraArgs[0]",
    ),
    (
        "flag-with-underscores",
        spec_set("models[0].extraArgs", ["--trust_remote_code"]),
        "spec.models[0].extraArgs[0]",
    ),
    ("flag-abbreviated", spec_set("models[0].extraArgs", ["--trust-remote"]), "spec.models[0].extraArgs[0]"),
    (
        "flags-from-a-file",
        spec_set("models[0].extraArgs", ["--config", "/tmp/f.yaml"]),
        "spec.models[0].extraArgs[0]",
    ),
    ("upper-case-pvc-source", spec_set("models[0].source", "PVC://victim-claim/m"), "spec.models[0].source"),
    (
        "other-teams-weights",
        spec_set("models[0].source", "s3://other-team-bucket/w"),
        "spec.models[0].source",
    ),
    (
        "other-teams-benchmark",
        spec_set("benchmark.uri", "s3://other-team-bucket/q.jsonl"),
        "spec.benchmark.uri",
    ),
    (
        "foreign-storage-endpoint",
        spec_set("storage.endpointUrl", "http://evil.example:9000"),
        "spec.storage.endpointUrl",
    ),
    (
        "other-teams-benchmark-naming-a-secret",
        chained(
            spec_set("storage.credentialsSecretRef", {"name": "kubejury-storage"}),
            spec_set("benchmark.uri", "s3://other-team-bucket/q.jsonl"),
        ),
        "spec.benchmark.uri",
    ),
    (
        "reserved-nodes",
        spec_set("models[0].nodeSelector", {"dedicated": "team-b"}),
        "spec.models[0].nodeSelector.dedicated",
    ),
)
