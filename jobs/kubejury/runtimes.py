"""The serving runtimes a model or judge may name, and what each one means for every part.

Why this module exists: a spec entry's ``runtime`` decides whether the operator brings up a server
or calls an existing endpoint, which weights the server reads, the checkpoint it assumes, how it
spells a repetition penalty, and whether a judge that is an evaluated model shares that model's
server. Those answers were string comparisons (``runtime == "llamacpp"``) spread over the engine
and the operator; here each runtime is one frozen :class:`ServingRuntime` that answers them, and
:func:`runtime_of` is the one way from a name to its answers.

It also holds the two rules about servers that several parts must agree on: when a judge shares
its model's server (:func:`judge_shares_server`) and the key under which a judge's own placement
is recorded when a model of the same name took its name (:func:`judge_placement_key`).

Vocabulary layer: imports nothing from ``kubejury`` except :mod:`kubejury.errors`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, Protocol, TypeVar, get_args

from kubejury.errors import ConfigError

RuntimeName = Literal["vllm", "llamacpp", "ollama", "openai"]
"""The names a spec may give ``runtime`` (the CRD's enum is generated from this)."""


class UnknownRuntimeError(ConfigError, ValueError):
    """A runtime name the registry does not know (a ``ValueError`` too, as callers long caught)."""


@dataclass(frozen=True, slots=True)
class ServingRuntime:
    """What one runtime means: where it runs, what it loads and how requests address it."""

    name: RuntimeName
    in_cluster: bool
    """The operator brings up a server for it (Deployment and Service); else an external endpoint."""
    serves_gguf: bool
    """It loads GGUF files (llama.cpp, Ollama): quantizations are GGUF tensor types."""
    default_checkpoint: Literal["bf16", "gguf"] | None
    """The checkpoint format an entry that names none is taken to have (``None``: not applicable)."""
    default_source_embedded: bool = False
    """An entry without a source serves the embedded model (llama.cpp only)."""
    starts_in_local_mode: bool = False
    """``kubejury run`` on a workstation starts this server itself."""
    reads_s3_weights: bool = False
    """It streams ``s3://`` weights (vLLM's Run:ai streamer)."""
    pulls_ollama_tags: bool = False
    """It pulls ``ollama://<tag>`` sources."""
    low_precision_kernels: bool = False
    """It computes in FP8/FP4 on GPUs that have them (vLLM); the others compute in BF16."""
    repetition_penalty_path: tuple[str, ...] = ()
    """Where a chat request carries the repetition penalty (``()``: the API has none)."""

    @property
    def external(self) -> bool:
        """Requests go to an endpoint that exists already (nothing is deployed)."""
        return not self.in_cluster


VLLM = ServingRuntime(
    name="vllm",
    in_cluster=True,
    serves_gguf=False,
    default_checkpoint="bf16",
    reads_s3_weights=True,
    low_precision_kernels=True,
    repetition_penalty_path=("repetition_penalty",),
)
LLAMACPP = ServingRuntime(
    name="llamacpp",
    in_cluster=True,
    serves_gguf=True,
    default_checkpoint="gguf",
    default_source_embedded=True,
    starts_in_local_mode=True,
    repetition_penalty_path=("repeat_penalty",),
)
OLLAMA = ServingRuntime(
    name="ollama",
    in_cluster=True,
    serves_gguf=True,
    default_checkpoint="gguf",
    pulls_ollama_tags=True,
    repetition_penalty_path=("options", "repeat_penalty"),
)
OPENAI = ServingRuntime(name="openai", in_cluster=False, serves_gguf=False, default_checkpoint=None)

REGISTRY: Mapping[str, ServingRuntime] = {r.name: r for r in (VLLM, LLAMACPP, OLLAMA, OPENAI)}
RUNTIME_NAMES: tuple[str, ...] = get_args(RuntimeName)
DEFAULT_RUNTIME: ServingRuntime = VLLM
"""The runtime of an entry that names none."""


def runtime_of(name: str) -> ServingRuntime:
    """The runtime called ``name``; :class:`UnknownRuntimeError` naming the known ones otherwise."""
    found = REGISTRY.get(name)
    if found is None:
        raise UnknownRuntimeError(f"unknown runtime {name!r}: expected one of {', '.join(RUNTIME_NAMES)}")
    return found


def recorded_runtime(name: str) -> ServingRuntime | None:
    """The runtime a record read back names (a placement in ``status``), or ``None`` when it names
    none the registry knows: a hand-edited or older record is read, not refused."""
    return REGISTRY.get(name)


def is_runtime(name: object) -> bool:
    """Whether ``name`` is a runtime the registry knows (a raw spec value may be anything)."""
    return isinstance(name, str) and name in REGISTRY


def gguf_runtime_names() -> tuple[str, ...]:
    """The runtimes that load GGUF files, in registry order (for messages and vocabularies)."""
    return tuple(r.name for r in REGISTRY.values() if r.serves_gguf)


# ----------------------------------------------------------------------- servers a judge shares


class ServedEntry(Protocol):
    """What the sharing rule reads of a model or judge entry (``kubejury.config.spec.ModelSpec``)."""

    @property
    def name(self) -> str: ...
    @property
    def runtime(self) -> str: ...
    @property
    def source(self) -> str | None: ...
    @property
    def quantization(self) -> str: ...


class JudgeEntry(ServedEntry, Protocol):
    """A judge entry: a served entry that may name the evaluated model it is (``sameAs``)."""

    @property
    def same_as(self) -> str | None: ...


def judge_shares_server(model: ServedEntry, judge: JudgeEntry) -> bool:
    """A judge that is an evaluated model (``sameAs``) and runs the same way — same runtime, source
    and quantization, on a server the operator brings up — is served by that model's server."""
    return (
        judge.same_as == model.name
        and model.runtime == judge.runtime
        and model.source == judge.source
        and model.quantization == judge.quantization
        and runtime_of(model.runtime).in_cluster
    )


JUDGE_KEY_SUFFIX = " (judge)"
_Value = TypeVar("_Value")


def judge_placement_key(name: str) -> str:
    """``"<name> (judge)"``: where a judge's placement is recorded when a model named ``name`` holds
    a different one under the plain name."""
    return f"{name}{JUDGE_KEY_SUFFIX}"


def judge_placement(placements: Mapping[str, _Value], name: str) -> _Value | None:
    """The placement of judge ``name``: its own key when it has one, else the shared plain name."""
    return placements.get(judge_placement_key(name)) or placements.get(name)
