"""Cross-field rules of an EvalRun spec, checked on the raw mapping.

The pydantic models (:mod:`kubejury.config.spec`) check each field's shape. What needs several fields —
unique names, at least one judge, source vs runtime, quantization vs runtime and checkpoint, a
weight for every level asked — lives here, written against the *raw* ``spec`` mapping (camelCase
or snake_case keys, possibly malformed), so that one list of problems can be reported at once:
by ``kubejury validate``, by :func:`kubejury.config.spec.parse_evalrun`, and by the operator's admission
webhook. Each problem names its field path and says what is allowed.

The runtime and quantization vocabularies are defined here too, for the models, the webhook and
the placement planner, and so are the single-field rules that several parts must agree on: the
resource quantities the planner can read, the paths a model server Pod already mounts, the
judging template's placeholders and the most bootstrap resamples an aggregation may ask for.
"""

from __future__ import annotations

import itertools
import math
import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kubejury.config.embedded_models import EMBEDDED_MODELS
from kubejury.judging.judge_prompt import PLACEHOLDERS
from kubejury.runtimes import DEFAULT_RUNTIME, RUNTIME_NAMES, gguf_runtime_names, is_runtime, runtime_of
from kubejury.stats.scoring import DEFAULT_LEVEL_WEIGHTS

RUNTIMES: tuple[str, ...] = RUNTIME_NAMES
LOCAL_RUNTIMES: frozenset[str] = frozenset(gguf_runtime_names())

#: Quantizations vLLM runs (``auto`` lets the placement planner choose per GPU).
VLLM_QUANTIZATIONS: tuple[str, ...] = ("auto", "bf16", "fp16", "fp8", "nvfp4", "mxfp4", "awq", "gptq")

#: GGUF tensor types llama.cpp and Ollama load (lower case). ``mxfp4`` is gpt-oss's GGUF format.
# fmt: off
GGUF_TYPES: tuple[str, ...] = (
    "f32", "f16", "bf16", "q8_0", "q6_k", "q5_k_m", "q5_k_s", "q5_1", "q5_0", "q4_k_m", "q4_k_s", "q4_1",
    "q4_0", "q3_k_l", "q3_k_m", "q3_k_s", "q2_k", "iq4_xs", "iq4_nl", "iq3_m", "iq3_s", "iq3_xs", "iq3_xxs",
    "iq2_m", "iq2_s", "iq2_xs", "iq2_xxs", "iq1_m", "iq1_s", "tq2_0", "tq1_0", "mxfp4",
)
# fmt: on
LOCAL_QUANTIZATIONS: tuple[str, ...] = ("auto", *GGUF_TYPES)
ALL_QUANTIZATIONS: tuple[str, ...] = tuple(dict.fromkeys((*VLLM_QUANTIZATIONS, *GGUF_TYPES)))

#: Checkpoint formats a given explicit vLLM quantization needs (``None``: any).
_QUANT_NEEDS_CHECKPOINT: dict[str, tuple[str, ...]] = {
    "bf16": ("bf16", "fp16"),
    "fp16": ("bf16", "fp16"),
    "fp8": ("bf16", "fp16", "fp8"),
    "nvfp4": ("nvfp4",),
    "mxfp4": ("mxfp4",),
    "awq": ("awq",),
    "gptq": ("gptq",),
}

SOURCE_SCHEMES: tuple[str, ...] = ("hf", "s3", "pvc", "file", "embedded", "ollama", "http", "https")
URI_SCHEME = re.compile(r"^(?P<scheme>[A-Za-z][A-Za-z0-9+.-]*)://")


def lower_scheme(uri: str) -> str:
    """``uri`` with its scheme lower-cased (``S3://Bucket/x`` → ``s3://Bucket/x``); the rest kept."""
    match = URI_SCHEME.match(uri)
    if match is None:
        return uri
    scheme = match["scheme"]
    return scheme.lower() + uri[len(scheme) :]


def kube_name(name: str) -> str:
    """The DNS-1123 form of a model, judge or series name (lower case, ``.``/``_`` → ``-``).

    The operator names Deployments, Services and Jobs after it; two entries whose Kubernetes names
    would collide are rejected by :func:`spec_problems`.
    """
    return re.sub(r"[^a-z0-9-]", "-", name.lower()).strip("-")


def normalize_quantization(value: str) -> str:
    """Lower-case a quantization name (``Q4_K_M`` → ``q4_k_m``; ``FP8`` → ``fp8``)."""
    return value.strip().lower()


def is_gguf_type(quantization: str) -> bool:
    """Whether ``quantization`` names a GGUF tensor type (``mxfp4`` and ``bf16`` count as both)."""
    return normalize_quantization(quantization) in GGUF_TYPES


# --------------------------------------------------------------------------------------------
# Single-field rules shared with the operator (resources, mounts) and the judging stage
# --------------------------------------------------------------------------------------------

#: Most bootstrap resamples of an aggregation (spec.scoring.bootstrapSamples, ``kubejury report
#: --bootstrap``): the resample indices alone take questions × resamples × 8 bytes.
MAX_BOOTSTRAP_SAMPLES = 1_000_000

# A memory quantity the planner (kubejury_operator.manifests.memory_bytes) reads: bytes, with an
# optional binary or decimal suffix. Kubernetes also accepts 'm' (millibytes), P/E suffixes and
# exponents; none of them is a sensible model-server request, and the planner cannot add them up.
MEMORY_QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|k|M|G|T)?$"
_MEMORY_QUANTITY = re.compile(r"^(?P<number>[0-9]+(?:\.[0-9]+)?)(?P<suffix>Ki|Mi|Gi|Ti|k|M|G|T)?$")
_SUFFIX_BYTES: dict[str | None, int] = {None: 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_SUFFIX_BYTES.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40})
MIN_MEMORY_BYTES = 2**20  # 1Mi: below that no model server starts
MAX_MEMORY_BYTES = 64 * 2**40  # 64Ti: above the largest nodes made, far below the API's limits

# A CPU quantity: cores (at most three decimals, the API's precision) or millicores.
CPU_QUANTITY_PATTERN = r"^([0-9]+(\.[0-9]{1,3})?|[0-9]+m)$"
_CPU_QUANTITY = re.compile(r"^(?:(?P<cores>[0-9]+(?:\.[0-9]{1,3})?)|(?P<millicores>[0-9]+)m)$")
MAX_CPU_MILLICORES = 1024 * 1000  # 1024 cores


def memory_quantity_bytes(quantity: str) -> int:
    """Bytes in a memory quantity (``64Gi``, ``512Mi``, ``8G``, ``1048576``); ``ValueError`` naming
    the accepted forms otherwise. The same arithmetic as the planner's, so both agree on a value."""
    match = _MEMORY_QUANTITY.match(quantity.strip())
    if match is None:
        hint = " ('m' means millibytes)" if quantity.strip().endswith("m") else ""
        raise ValueError(
            f"{quantity!r} is not a memory quantity in bytes{hint}: write a number with an optional suffix "
            "Ki, Mi, Gi, Ti (binary) or k, M, G, T (decimal), e.g. 64Gi or 512Mi"
        )
    return int(float(match["number"]) * _SUFFIX_BYTES[match["suffix"]])


def memory_quantity_problem(quantity: str) -> str | None:
    """What is wrong with a model server's memory request, or ``None`` when the planner can use it."""
    try:
        count = memory_quantity_bytes(quantity)
    except ValueError as error:
        return str(error)
    if not MIN_MEMORY_BYTES <= count <= MAX_MEMORY_BYTES:
        return f"{quantity!r} is outside 1Mi..64Ti: give the memory the server needs, e.g. 64Gi"
    return None


def cpu_quantity_problem(quantity: str) -> str | None:
    """What is wrong with a model server's CPU request, or ``None`` for 0 < cores <= 1024."""
    match = _CPU_QUANTITY.match(quantity.strip())
    if match is None:
        return (
            f"{quantity!r} is not a CPU quantity: write cores ('8', '0.5', at most three decimals) or "
            "millicores ('500m')"
        )
    millicores = int(match["millicores"]) if match["millicores"] else round(float(match["cores"]) * 1000)
    if not 0 < millicores <= MAX_CPU_MILLICORES:
        return f"{quantity!r} is outside 1m..1024 cores: give the cores the server needs, e.g. '8' or '500m'"
    return None


#: Where a model server Pod mounts its own volumes (kubejury_operator.manifests._server_container):
#: the writable scratch space (HOME, the runtimes' temporary files), vLLM's memory-backed shared
#: memory, and a ``pvc://`` source's claim. The model cache (spec.modelCache.mountPath) must not
#: take any of them: the API server refuses a Pod with two mounts at one path.
SERVER_TMP_MOUNT = "/tmp"
SERVER_SHM_MOUNT = "/dev/shm"
SERVER_SOURCE_MOUNT = "/models/src"
#: Paths the kubelet and the container runtime fill in every container (/etc/hosts…, the
#: service-account token, /proc, /sys, /dev): a volume there hides or breaks them.
RUNTIME_PATHS: tuple[str, ...] = (
    "/proc",
    "/sys",
    "/dev",
    "/etc/hosts",
    "/etc/hostname",
    "/etc/resolv.conf",
    "/var/run/secrets/kubernetes.io/serviceaccount",
)
RESERVED_MOUNT_PATHS: tuple[str, ...] = (
    SERVER_TMP_MOUNT,
    SERVER_SHM_MOUNT,
    SERVER_SOURCE_MOUNT,
    *RUNTIME_PATHS,
)
#: The images keep /root at mode 0700 and the servers run as uid 1000: nothing there is writable.
_UNWRITABLE_HOME = "/root"


def normalize_mount_path(path: str) -> str:
    """``path`` without doubled slashes, ``.`` segments or a trailing slash (``//tmp/`` → ``/tmp``)."""
    normal = posixpath.normpath(path)
    return "/" + normal.lstrip("/")


def _overlaps(path: str, other: str) -> bool:
    """Whether one of two normalised absolute paths is the other or lies inside it."""
    return (
        path == other or path.startswith(other.rstrip("/") + "/") or other.startswith(path.rstrip("/") + "/")
    )


def mount_path_problem(path: str) -> str | None:
    """What is wrong with a model cache mount path, or ``None`` when it is free in the server Pod."""
    if not path.startswith("/"):
        return f"{path!r} is not an absolute path: use a path such as /models/cache"
    if ".." in path.split("/"):
        return f"{path!r} has a '..' segment, which Kubernetes refuses: use a path such as /models/cache"
    normal = normalize_mount_path(path)
    if normal == _UNWRITABLE_HOME or normal.startswith(_UNWRITABLE_HOME + "/"):
        return (
            f"{path} is under /root, which the model servers (uid 1000) cannot write: use a path such as "
            "/models/cache"
        )
    taken = [reserved for reserved in RESERVED_MOUNT_PATHS if _overlaps(normal, reserved)]
    if taken:
        more = f" (and {len(taken) - 1} more)" if len(taken) > 1 else ""
        return (
            f"{path} overlaps {taken[0]}{more}: the model server Pod mounts {SERVER_TMP_MOUNT}, "
            f"{SERVER_SHM_MOUNT} and {SERVER_SOURCE_MOUNT} itself, and {', '.join(RUNTIME_PATHS)} belong to "
            "the container runtime; use a folder neither inside nor above them, e.g. /models/cache"
        )
    return None


_TEMPLATE_FIELD = re.compile(r"\{\s*[A-Za-z_][A-Za-z0-9_]*\s*\}")


def prompt_template_problem(template: str) -> str | None:
    """What is wrong with a judging template, or ``None``.

    The template must hold each of ``{question}``, ``{reference}`` and ``{answer}`` exactly once
    (the judge needs all three; a second copy of the answer would double untrusted text). Anything
    else written like a placeholder (``{answers}``, ``{ answer }``, ``{Answer}``) is refused as a
    typo: it would reach the judge as literal text. Other braces (a JSON example) are text: the
    template is rendered by substituting the three placeholders only, never with ``str.format``.
    """
    for name in PLACEHOLDERS:
        count = template.count("{" + name + "}")
        if count != 1:
            return (
                f"the judging template must contain {{{name}}} exactly once (found {count}); "
                "placeholders are {question}, {reference} and {answer}"
            )
    known = {"{" + name + "}" for name in PLACEHOLDERS}
    unknown = [field for field in _TEMPLATE_FIELD.findall(template) if field not in known]
    if unknown:
        return (
            f"unknown placeholder {unknown[0]}: the only placeholders are {{question}}, {{reference}} and "
            "{answer}, written exactly so"
        )
    return None


# --------------------------------------------------------------------------------------------
# Cross-field checks (shared with the operator's admission webhook)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldProblem:
    """One thing wrong with an EvalRun: the field's path and what is allowed there."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def _entries(spec: Mapping[str, Any], key: str) -> list[tuple[int, Mapping[str, Any]]]:
    value = spec.get(key)
    if not isinstance(value, list):
        return []
    return [(i, item) for i, item in enumerate(value) if isinstance(item, Mapping)]


def _get(entry: Mapping[str, Any], camel: str) -> Any:
    """A field by its camelCase name, or by its snake_case name (both are accepted on input)."""
    if camel in entry:
        return entry[camel]
    snake = re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()
    return entry.get(snake)


def _check_unique(
    spec: Mapping[str, Any], key: str, prefix: str, what: str, problems: list[FieldProblem]
) -> None:
    seen: dict[str, tuple[int, str]] = {}
    for i, entry in _entries(spec, key):
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            continue
        kname = kube_name(name)
        if kname in seen:
            j, other = seen[kname]
            same = "is already used by" if other == name else "collides (lower-cased for Kubernetes) with"
            problems.append(
                FieldProblem(
                    _join(prefix, f"{key}[{i}].name"),
                    f"{what} name {name!r} {same} {_join(prefix, f'{key}[{j}]')} {other!r}; {what} names must be unique",
                )
            )
        else:
            seen[kname] = (i, name)


def _check_endpoint(entry: Mapping[str, Any], path: str, problems: list[FieldProblem]) -> None:
    name = _get(entry, "runtime") or DEFAULT_RUNTIME.name
    if not is_runtime(name):
        return  # reported by the schema
    serving = runtime_of(name)
    runtime = serving.name
    raw_quant = _get(entry, "quantization")
    quant = normalize_quantization(raw_quant) if isinstance(raw_quant, str) else "auto"
    source = _get(entry, "source")
    scheme = ""
    if isinstance(source, str):
        match = URI_SCHEME.match(source)
        scheme = match["scheme"].lower() if match else ""
    checkpoint = _get(entry, "checkpoint")

    if serving.external:
        if scheme not in ("http", "https"):
            problems.append(
                FieldProblem(
                    f"{path}.source", "runtime openai needs source to be the endpoint's http(s):// base URL"
                )
            )
    else:
        if scheme in ("http", "https"):
            problems.append(
                FieldProblem(
                    f"{path}.source",
                    f"an http(s):// source is an existing endpoint: set runtime: openai (runtime {runtime} needs "
                    "hf://, s3://, pvc:// or file:// weights)",
                )
            )
        if source is None and not serving.default_source_embedded and _get(entry, "ggufPath") is None:
            problems.append(
                FieldProblem(
                    f"{path}.source",
                    f"runtime {runtime} needs a source (hf://org/repo, s3://…, pvc://…, file://…); only llamacpp "
                    "defaults to the embedded model",
                )
            )
        if scheme == "ollama" and not serving.pulls_ollama_tags:
            problems.append(FieldProblem(f"{path}.source", "ollama:// sources need runtime: ollama"))
        if scheme == "s3" and not serving.reads_s3_weights:
            problems.append(
                FieldProblem(
                    f"{path}.source",
                    f"runtime {runtime} cannot read s3:// weights (only vLLM streams them from S3): copy the "
                    "GGUF file to a PersistentVolumeClaim and use pvc://claim/path/model.gguf, or hf://org/repo",
                )
            )
        if scheme == "embedded" and source.lower() not in EMBEDDED_MODELS:
            problems.append(
                FieldProblem(
                    f"{path}.source",
                    f"unknown embedded model {source!r}; kubejury carries {', '.join(sorted(EMBEDDED_MODELS))}",
                )
            )

    if quant not in ALL_QUANTIZATIONS or serving.external:
        return  # unknown values are reported by the schema; openai: informational only
    if not serving.serves_gguf:
        if quant not in VLLM_QUANTIZATIONS:
            problems.append(
                FieldProblem(
                    f"{path}.quantization",
                    f"{quant!r} is a GGUF type: use runtime llamacpp or ollama; runtime vllm allows "
                    + ", ".join(VLLM_QUANTIZATIONS),
                )
            )
        elif checkpoint == "gguf":
            problems.append(
                FieldProblem(f"{path}.checkpoint", "gguf checkpoints need runtime llamacpp or ollama")
            )
        elif quant in _QUANT_NEEDS_CHECKPOINT and isinstance(checkpoint, str):
            needs = _QUANT_NEEDS_CHECKPOINT[quant]
            if checkpoint not in needs:
                problems.append(
                    FieldProblem(
                        f"{path}.quantization",
                        f"quantization {quant} cannot be applied to a {checkpoint} checkpoint; it needs checkpoint "
                        + " or ".join(needs)
                        + " (or use quantization: auto)",
                    )
                )
    elif quant not in LOCAL_QUANTIZATIONS:
        problems.append(
            FieldProblem(
                f"{path}.quantization",
                f"{quant!r} runs on vLLM only: use runtime vllm, or a GGUF type (e.g. q4_k_m, q6_k, q8_0) or auto "
                f"for runtime {runtime}",
            )
        )
    elif isinstance(checkpoint, str) and checkpoint != "gguf":
        problems.append(
            FieldProblem(f"{path}.checkpoint", f"runtime {runtime} loads GGUF files: checkpoint must be gguf")
        )


RESERVED_SERIES_NAMES: frozenset[str] = frozenset(("spec.json", "report", "progress", "spec-history"))
"""Folders and files at a run's top level beside the series folders (see docs/storage.md); compared
without case, as a case-insensitive file system (local mode on macOS or Windows) would."""
_SHARD_SUFFIX = re.compile(r"\.shard-\d+-of-\d+$", re.IGNORECASE)


def _check_layout_names(spec: Mapping[str, Any], prefix: str, problems: list[FieldProblem]) -> None:
    """Names that would share a storage path with something else of the run."""
    for i, entry in _entries(spec, "series"):
        name = entry.get("name")
        if isinstance(name, str) and name.lower() in RESERVED_SERIES_NAMES:
            problems.append(
                FieldProblem(
                    _join(prefix, f"series[{i}].name"),
                    f"{name!r} is reserved for the run's own files "
                    f"({', '.join(sorted(RESERVED_SERIES_NAMES))}); choose another series name",
                )
            )
    for key in ("models", "judges"):
        for i, entry in _entries(spec, key):
            name = entry.get("name")
            shard = _SHARD_SUFFIX.search(name) if isinstance(name, str) else None
            if shard is not None:
                problems.append(
                    FieldProblem(
                        _join(prefix, f"{key}[{i}].name"),
                        f"{name!r} ends like a shard's progress file (.shard-<i>-of-<n>) and would read "
                        f"as a shard of {str(name)[: shard.start()]!r}; choose another name",
                    )
                )


def spec_problems(spec: Mapping[str, Any], *, prefix: str = "spec") -> list[FieldProblem]:
    """Every cross-field problem of an EvalRun ``spec`` mapping (camelCase or snake_case keys).

    Works on raw, possibly malformed input (entries of the wrong type are skipped: the schema
    reports those), so that the admission webhook and :func:`parse_evalrun` can list all problems
    at once. Checks: at least one model, judge and series; unique model, judge and series names
    (also after lower-casing for Kubernetes); ``sameAs`` names a model; source vs runtime;
    explicit quantization vs runtime and checkpoint; a positive weight for every level asked;
    comparisons between two different models of spec.models, each pair once; a budget's goal
    comparisons with pairs to decide, and its looks increasing to 1.
    """
    problems: list[FieldProblem] = []
    for key, what in (("models", "model"), ("judges", "judge")):
        value = spec.get(key)
        if not isinstance(value, list) or not value:
            problems.append(FieldProblem(_join(prefix, key), f"at least one {what} is required"))
    series = spec.get("series")
    if isinstance(series, list) and not series:
        problems.append(
            FieldProblem(
                _join(prefix, "series"), "at least one series is required (or omit it for the default)"
            )
        )
    for key, what in (("models", "model"), ("judges", "judge"), ("series", "series")):
        _check_unique(spec, key, prefix, what, problems)
    _check_layout_names(spec, prefix, problems)
    model_names = {
        name for _, entry in _entries(spec, "models") if isinstance(name := entry.get("name"), str)
    }
    for key in ("models", "judges"):
        for i, entry in _entries(spec, key):
            _check_endpoint(entry, _join(prefix, f"{key}[{i}]"), problems)
    for i, entry in _entries(spec, "judges"):
        same_as = _get(entry, "sameAs")
        if isinstance(same_as, str) and same_as not in model_names:
            known = ", ".join(sorted(str(n) for n in model_names if isinstance(n, str))) or "none"
            problems.append(
                FieldProblem(
                    _join(prefix, f"judges[{i}].sameAs"),
                    f"{same_as!r} is not the name of an entry of spec.models (names: {known})",
                )
            )
    problems.extend(_weight_problems(spec, prefix))
    problems.extend(_comparison_problems(spec, prefix, model_names))
    problems.extend(_budget_problems(spec, prefix))
    return problems


def _budget_problems(spec: Mapping[str, Any], prefix: str) -> list[FieldProblem]:
    """``budget``: goal comparisons names pairs in spec.comparisons; looks increase to exactly 1."""
    budget = spec.get("budget")
    if not isinstance(budget, Mapping):
        return []
    problems: list[FieldProblem] = []
    path = _join(prefix, "budget")
    comparisons = spec.get("comparisons")
    if budget.get("goal") == "comparisons" and not (isinstance(comparisons, list) and comparisons):
        problems.append(
            FieldProblem(
                f"{path}.goal",
                "goal 'comparisons' decides the pairs of spec.comparisons, and it names none: add "
                "spec.comparisons: [{a, b, margin}] or choose goal leading-group or full-ranking",
            )
        )
    looks = budget.get("looks")
    if isinstance(looks, list) and looks and all(isinstance(t, int | float) for t in looks):
        steps = all(b > a for a, b in itertools.pairwise(looks))
        if not steps or looks[0] <= 0 or looks[-1] != 1:
            problems.append(
                FieldProblem(
                    f"{path}.looks",
                    f"information fractions must increase from above 0 to exactly 1, got {looks}",
                )
            )
    return problems


def _comparison_problems(spec: Mapping[str, Any], prefix: str, model_names: set[Any]) -> list[FieldProblem]:
    """``comparisons``: a and b name two different entries of spec.models, each pair once."""
    problems: list[FieldProblem] = []
    known = ", ".join(sorted(str(n) for n in model_names if isinstance(n, str))) or "none"
    first_at: dict[frozenset[str], int] = {}
    for i, entry in _entries(spec, "comparisons"):
        path = _join(prefix, f"comparisons[{i}]")
        a, b = entry.get("a"), entry.get("b")
        for key, name in (("a", a), ("b", b)):
            if isinstance(name, str) and name not in model_names:
                problems.append(
                    FieldProblem(
                        f"{path}.{key}",
                        f"{name!r} is not the name of an entry of spec.models (names: {known})",
                    )
                )
        if not (isinstance(a, str) and isinstance(b, str)):
            continue
        if a == b:
            problems.append(
                FieldProblem(path, f"a and b are both {a!r}: a comparison needs two different models")
            )
            continue
        pair = frozenset((a, b))
        if pair in first_at:
            problems.append(
                FieldProblem(
                    path,
                    f"{a!r} and {b!r} are already compared in {_join(prefix, f'comparisons[{first_at[pair]}]')}",
                )
            )
        first_at.setdefault(pair, i)
    return problems


def _weight_problems(spec: Mapping[str, Any], prefix: str) -> list[FieldProblem]:
    problems: list[FieldProblem] = []
    scoring = spec.get("scoring")
    weights_raw = _get(scoring, "levelWeights") if isinstance(scoring, Mapping) else None
    path = _join(prefix, "scoring.levelWeights")
    weights: dict[int, Any] = {}
    if weights_raw is None:
        weights = dict(DEFAULT_LEVEL_WEIGHTS)
    elif isinstance(weights_raw, Mapping):
        for key, value in weights_raw.items():
            try:
                level = int(key)
            except (TypeError, ValueError):
                problems.append(
                    FieldProblem(f"{path}.{key}", "keys are difficulty levels: positive integers")
                )
                continue
            if level < 1:
                problems.append(
                    FieldProblem(f"{path}.{key}", "keys are difficulty levels: positive integers")
                )
            weights[level] = value
            if (
                isinstance(value, bool)
                or not isinstance(value, int | float)
                or not math.isfinite(value)
                or value <= 0
            ):
                problems.append(
                    FieldProblem(f"{path}.{key}", f"weight must be a positive finite number, got {value!r}")
                )
    else:
        return problems  # the schema reports the wrong type
    benchmark = spec.get("benchmark")
    filters = _get(benchmark, "filters") if isinstance(benchmark, Mapping) else None
    levels_raw = _get(filters, "levels") if isinstance(filters, Mapping) else None
    if isinstance(levels_raw, list) and levels_raw:
        levels = sorted({lvl for lvl in levels_raw if isinstance(lvl, int) and not isinstance(lvl, bool)})
        source = "listed in spec.benchmark.filters.levels"
    else:
        levels = sorted(DEFAULT_LEVEL_WEIGHTS)
        source = "asked by default (1, 2, 3)"
    missing = [lvl for lvl in levels if lvl not in weights]
    if missing:
        problems.append(
            FieldProblem(
                path,
                "needs a positive weight for every level "
                + source
                + "; missing: "
                + ", ".join(map(str, missing)),
            )
        )
    return problems
