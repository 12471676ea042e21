"""Sampling parameters of a series, spelled the way each serving runtime understands them.

A series says "temperature 0, repetition penalty 1.2"; the servers disagree on how to say it:
vLLM takes ``repetition_penalty`` at the top level of the request, llama.cpp (and
llama-cpp-python) take ``repeat_penalty``, Ollama takes ``options.repeat_penalty``, and a plain
OpenAI API (OpenAI, DeepSeek, ...) has no such parameter and may reject unknown ones. This module
is the single place that translates; it is pure except for one log line per (runtime, model,
parameter) that had to be dropped, so a user learns once that a series could not be honoured as
written.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass
from typing import Any

from kubejury.runtimes import runtime_of

log = logging.getLogger("kubejury.inference.sampling")

# Top-level request fields a plain OpenAI-compatible API may refuse; the client drops one of these
# (and remembers it for the endpoint) when a 400 names it. ``max_tokens`` is never dropped.
DROPPABLE_FIELDS: frozenset[str] = frozenset(
    {"temperature", "top_p", "seed", "repetition_penalty", "repeat_penalty", "options", "response_format"}
)

_warned: set[tuple[str, str, str]] = set()
_warned_lock = threading.Lock()


@dataclass(frozen=True, slots=True)
class SamplingParams:
    """What a series asks of the sampler; ``None`` means "server default"."""

    temperature: float | None = None
    top_p: float | None = None
    repetition_penalty: float | None = None
    max_tokens: int | None = None
    seed: int | None = None

    @classmethod
    def from_series(cls, series: object) -> SamplingParams:
        """Read a spec series (pydantic model or anything with these attributes).

        Accepts both snake_case attributes and the spec's camelCase names, so this module does not
        depend on how the spec spells its Python attributes.
        """

        def pick(*names: str) -> Any:
            for name in names:
                value = getattr(series, name, None)
                if value is not None:
                    return value
            return None

        temperature = pick("temperature")
        top_p = pick("top_p", "topP")
        penalty = pick("repetition_penalty", "repetitionPenalty", "repeat_penalty")
        max_tokens = pick("max_tokens", "maxTokens")
        seed = pick("seed")
        return cls(
            temperature=None if temperature is None else float(temperature),
            top_p=None if top_p is None else float(top_p),
            repetition_penalty=None if penalty is None else float(penalty),
            max_tokens=None if max_tokens is None else int(max_tokens),
            seed=None if seed is None else int(seed),
        )


def warn_dropped_once(runtime: str, model: str, parameter: str, reason: str) -> None:
    """Log, once per process for each (runtime, model, parameter), that a parameter was dropped."""
    key = (runtime, model, parameter)
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning("model %s (runtime %s): %s dropped: %s", model, runtime, parameter, reason)


def reset_warnings() -> None:
    """Forget which drops were already logged (tests)."""
    with _warned_lock:
        _warned.clear()


def request_fields(runtime: str, params: SamplingParams, *, model: str = "") -> dict[str, Any]:
    """The chat-completion request fields that express ``params`` for ``runtime``.

    Standard OpenAI fields (``temperature``, ``top_p``, ``max_tokens``, ``seed``) are sent to
    every runtime. The repetition penalty goes where the runtime reads it; for ``openai`` (a plain
    OpenAI API) it has no equivalent, so it is dropped and the drop is logged once. A penalty of
    exactly 1.0 is "no penalty" and is sent anyway where it is understood (it is what was asked).
    """
    path = runtime_of(runtime).repetition_penalty_path  # UnknownRuntimeError is a ValueError
    fields: dict[str, Any] = {}
    if params.temperature is not None:
        fields["temperature"] = params.temperature
    if params.top_p is not None:
        fields["top_p"] = params.top_p
    if params.max_tokens is not None:
        fields["max_tokens"] = params.max_tokens
    if params.seed is not None:
        fields["seed"] = params.seed
    penalty = params.repetition_penalty
    if penalty is not None:
        if path:
            fields.update(_nested(path, penalty))
        else:
            warn_dropped_once(
                runtime,
                model,
                "repetition_penalty",
                "plain OpenAI-compatible APIs have no repetition penalty (frequency_penalty is a different formula)",
            )
    return fields


def _nested(path: tuple[str, ...], value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for the path ``("a", "b")``: a field where the runtime reads it."""
    head, *rest = path
    return {head: _nested(tuple(rest), value) if rest else value}
