"""Which pairs of models a run compares for equivalence: the spec's, and one checkpoint's precisions.

Why this module exists: a run that serves the same checkpoint in two precisions (QwQ-32B at Q6_K
and at Q4_K_M in the study) raises the question whether the smaller one loses anything, whether or
not its author thought to ask. :func:`run_comparisons` returns the pairs ``spec.comparisons`` names
and adds every such precision pair the spec does not name, at
:data:`~kubejury.stats.equivalence.DEFAULT_MARGIN`. It works on plain model facts so that
:mod:`kubejury.config.spec` (which holds the pydantic models) and the tests can both use it.

Two models are one checkpoint in two precisions when both precisions are known and differ, and
their sources (or GGUF paths) are equal once the precision names in them are removed:
``ollama://qwq:32b-q6_K`` and ``ollama://qwq:32b-q4_K_M``, or one ``hf://org/Model-GGUF`` repository
served at Q6_K and at Q4_K_M. A model's precision is its explicit ``quantization``, else the format
of a natively quantized checkpoint (fp8, nvfp4, mxfp4, awq, gptq); ``auto`` on a bf16 checkpoint is
unknown until the planner chooses, so such a model is never paired automatically. Runtime
``openai`` entries are endpoints, not checkpoints, and are never paired. In a pair the higher
precision (more nominal bits) is ``a``: the difference is higher − lower precision.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from kubejury.config.spec_rules import ALL_QUANTIZATIONS
from kubejury.stats.equivalence import DEFAULT_MARGIN, ComparisonRequest

#: Names that say a precision (removed from a source before comparing checkpoints).
PRECISION_WORDS = frozenset({*ALL_QUANTIZATIONS, "gguf", "f16", "f32", "int4", "int8"}) - {"auto"}
#: Checkpoint formats that are their own precision when ``quantization`` is ``auto``.
NATIVE_PRECISIONS = frozenset({"fp8", "nvfp4", "mxfp4", "awq", "gptq"})
#: Nominal bits of the formats whose name holds no number.
_NO_NUMBER_BITS = 4
_SEPARATORS = re.compile(r"[-.:/@]+")
_BITS = re.compile(r"\d+")


@dataclass(frozen=True)
class ModelFacts:
    """What pairing needs of one ``spec.models`` entry."""

    name: str
    source: str | None
    quantization: str
    checkpoint: str | None
    runtime: str
    gguf_path: str | None = None


@dataclass(frozen=True)
class Requested:
    """One ``spec.comparisons`` entry."""

    a: str
    b: str
    margin: float


def precision_of(model: ModelFacts) -> str | None:
    """The precision the model is served in, when the spec says it (module docstring)."""
    quantization = model.quantization.lower()
    if quantization != "auto":
        return quantization
    checkpoint = (model.checkpoint or "").lower()
    return checkpoint if checkpoint in NATIVE_PRECISIONS else None


def nominal_bits(precision: str) -> int:
    """Bits per weight as the name says them: the first number (q4_k_m 4, fp8 8, bf16 16), else 4."""
    found = _BITS.search(precision)
    return int(found.group()) if found else _NO_NUMBER_BITS


def checkpoint_key(model: ModelFacts) -> str | None:
    """The model's source (or GGUF path) without precision names, or ``None`` when there is none."""
    where = model.gguf_path or model.source
    if not where or model.runtime == "openai":
        return None
    words = [w for w in _SEPARATORS.split(where.lower()) if w and w not in PRECISION_WORDS]
    return "/".join(words) or None


def precision_pairs(models: Sequence[ModelFacts]) -> list[tuple[str, str]]:
    """Every (higher, lower) precision pair of one checkpoint, in spec order of the first model."""
    pairs: list[tuple[str, str]] = []
    for k, first in enumerate(models):
        for second in models[k + 1 :]:
            p1, p2 = precision_of(first), precision_of(second)
            key = checkpoint_key(first)
            if p1 is None or p2 is None or p1 == p2 or key is None or key != checkpoint_key(second):
                continue
            higher_first = nominal_bits(p1) >= nominal_bits(p2)
            pairs.append((first.name, second.name) if higher_first else (second.name, first.name))
    return pairs


def run_comparisons(models: Sequence[ModelFacts], requested: Iterable[Requested]) -> list[ComparisonRequest]:
    """The spec's comparisons in order, then each precision pair it does not name (either order)."""
    named = [ComparisonRequest(r.a, r.b, r.margin, "spec") for r in requested]
    seen = {frozenset((c.a, c.b)) for c in named}
    automatic = [
        ComparisonRequest(a, b, DEFAULT_MARGIN, "automatic")
        for a, b in precision_pairs(models)
        if frozenset((a, b)) not in seen
    ]
    return [*named, *automatic]
