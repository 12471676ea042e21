"""One placement decision: the type the planner returns, the operator records and reads back.

Why this module exists: a placement is decided by :mod:`kubejury.placement.planner`, shown by
``kubejury plan``, turned into node selectors and GPU requests by the operator's manifest
builders, written into the EvalRun's ``status.placement`` and read back from there once the run
has left ``Pending`` (so a node change mid-run never changes a model's quantization). All of them
use this one frozen :class:`Placement`; :meth:`Placement.to_json` / :meth:`Placement.from_json`
are the status form and nothing else spells it. It is a record — it crosses from one reconcile to
a later one, and from the operator to ``kubejury status`` — so it lives in ``records``, which
imports nothing above the vocabulary: the operator reads a recorded placement without loading the
planning tables, and :mod:`kubejury.records.run_status` holds it without importing the work layer.

The status keeps a placement lean (issue 26): a short reason code (:data:`PLACEMENT_CODES`) and the
facts a user reads at a glance or the operator needs to rebuild the server (runtime, quantization,
GPUs, GPU product, estimated memory, node selector, tolerations, vLLM arguments), never the
planner's prose. The prose goes into Events on the run, one set per change of the recorded placement
(:func:`placement_event_messages` writes them, :func:`placement_notes` reads them back for
``kubejury status``). A status written before that, with the prose in ``reason``, still reads:
:meth:`Placement.from_json` is the one place that tells a code from prose.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

#: The reason codes of ``status.placement.<name>.reason``: where the server runs, or why not.
PLACED_ON_GPU = "PlacedOnGpu"
PLACED_ON_CPU = "PlacedOnCpu"
NOT_DEPLOYED = "NotDeployed"  # an existing endpoint outside the cluster: nothing to deploy
DOES_NOT_FIT = "DoesNotFit"  # no node can run it (the planner's prose says why)
PLACEMENT_CODES = frozenset({PLACED_ON_GPU, PLACED_ON_CPU, NOT_DEPLOYED, DOES_NOT_FIT})
#: What a code says, for a reader that has no Event with the prose (e.g. older than the Event TTL).
CODE_TEXT = {
    PLACED_ON_GPU: "placed on GPUs",
    PLACED_ON_CPU: "placed on CPU nodes",
    NOT_DEPLOYED: "existing endpoint: nothing to deploy",
    DOES_NOT_FIT: "no node can run it",
}
#: The Event that carries the planner's prose (:func:`placement_event_messages`).
PLACEMENT_EVENT_REASON = "Placement"
PLACEMENT_EVENT_HEADER = "Placement of"
#: An Event's message is cut at 1 KiB by the gateway; the prose is split to stay below it.
MAX_EVENT_MESSAGE = 1000


@dataclass(frozen=True, kw_only=True)
class Placement:
    """What the operator will do for one model or judge, and why.

    ``quantization`` is lower case; ``tensor_parallel_size`` is the number of GPUs (0 on CPU
    nodes and for runtime openai); ``vllm_args`` are the quantization-related arguments only
    (the manifest builders add TP, context length and the rest); ``memory_gib`` is the
    estimated total memory need (GPU, or RAM on CPU nodes); ``schedulable`` is False when no
    node can run the model, and ``reason`` then says why.
    """

    runtime: str
    quantization: str
    tensor_parallel_size: int
    name: str = ""
    schedulable: bool = True
    gpu_product: str | None = None
    node_selector: Mapping[str, str] = field(default_factory=dict)
    tolerations: Sequence[Mapping[str, Any]] = ()
    vllm_args: Sequence[str] = ()
    reason: str = ""
    memory_gib: float | None = None
    compute_capability: str | None = None
    code: str = ""  # the reason code, when the writer knows better than :attr:`reason_code` derives

    @property
    def reason_code(self) -> str:
        """The status's reason code (:data:`PLACEMENT_CODES`): :attr:`code` when set, else derived
        from where the placement runs."""
        if self.code:
            return self.code
        if not self.schedulable:
            return DOES_NOT_FIT
        return PLACED_ON_GPU if self.gpu_product else PLACED_ON_CPU

    def summary(self) -> str:
        """A short line of what the status says, for a reader without the prose: the code's
        text and the estimated memory (``placed on GPUs; needs about 43 GiB``)."""
        text = CODE_TEXT.get(self.reason_code, self.reason_code)
        if self.memory_gib is not None:
            text += f"; needs about {self.memory_gib:.0f} GiB"
        return text

    def plan_entry(self) -> dict[str, Any]:
        """The ``kubejury plan --format json`` entry (a fixed set of keys)."""
        return {
            "schedulable": self.schedulable,
            "runtime": self.runtime,
            "quantization": self.quantization,
            "tensor_parallel_size": self.tensor_parallel_size,
            "gpu_product": self.gpu_product,
            "node_selector": dict(self.node_selector),
            "reason": self.reason,
        }

    def to_json(self) -> dict[str, Any]:
        """The lean entry the operator writes under ``status.placement.<name>``: the reason code
        and the facts, a key only when it has a value (``schedulable`` only when False)."""
        entry: dict[str, Any] = {
            "reason": self.reason_code,
            "runtime": self.runtime,
            "quantization": self.quantization,
            "tensorParallelSize": self.tensor_parallel_size,
        }
        if not self.schedulable:
            entry["schedulable"] = False
        if self.gpu_product:
            entry["gpuProduct"] = self.gpu_product
        if self.memory_gib is not None:
            entry["memoryGiB"] = round(float(self.memory_gib), 1)
        if self.node_selector:
            entry["nodeSelector"] = dict(self.node_selector)
        if self.tolerations:
            entry["tolerations"] = [dict(t) for t in self.tolerations]
        if self.vllm_args:
            entry["vllmArgs"] = list(self.vllm_args)
        return entry

    def to_full_json(self) -> dict[str, Any]:
        """The entry as operators before issue 26 wrote it, the planner's prose in ``reason``. Kept
        only for the operator benchmark's ``KUBEJURY_STATUS_FORMAT=full`` design (the "before" it
        measures against); nothing else writes it, and :meth:`from_json` reads both."""
        entry: dict[str, Any] = {
            "schedulable": self.schedulable,
            "runtime": self.runtime,
            "quantization": self.quantization,
            "tensorParallelSize": self.tensor_parallel_size,
            "gpuProduct": self.gpu_product,
            "nodeSelector": dict(self.node_selector),
            "reason": self.reason,
        }
        if self.tolerations:
            entry["tolerations"] = [dict(t) for t in self.tolerations]
        if self.vllm_args:
            entry["vllmArgs"] = list(self.vllm_args)
        return entry

    @classmethod
    def from_json(cls, data: Mapping[str, Any], name: str = "") -> Placement:
        """A placement recorded by :meth:`to_json` (``name``: the key it was recorded under) — or
        by an operator before issue 26 (:meth:`to_full_json`): a ``reason`` that is no code is that
        operator's prose, kept as :attr:`reason`, and the code is derived. The one migration."""
        recorded = str(data.get("reason", "") or "")
        is_code = recorded in PLACEMENT_CODES
        memory = data.get("memoryGiB")
        read = cls(
            name=name,
            runtime=str(data.get("runtime", "")),
            quantization=str(data.get("quantization", "")),
            tensor_parallel_size=int(data.get("tensorParallelSize", 0) or 0),
            node_selector={str(k): str(v) for k, v in (data.get("nodeSelector") or {}).items()},
            tolerations=tuple(dict(t) for t in data.get("tolerations") or ()),
            vllm_args=tuple(str(a) for a in data.get("vllmArgs") or ()),
            schedulable=bool(data.get("schedulable", True)),
            reason="" if is_code else recorded,
            gpu_product=data.get("gpuProduct") or None,
            memory_gib=float(memory)
            if isinstance(memory, int | float) and not isinstance(memory, bool)
            else None,
        )
        code = recorded if is_code else _legacy_code(recorded)
        # ``code`` only when the facts alone would not say it, as the writer had it
        return read if code in ("", read.reason_code) else replace(read, code=code)


def _legacy_code(prose: str) -> str:
    """The code of a placement recorded with prose: only the one the prose alone tells (an
    endpoint outside the cluster); the rest is derived from the facts (:attr:`reason_code`)."""
    return NOT_DEPLOYED if prose.startswith("existing OpenAI-compatible endpoint") else ""


def placement_event_messages(placements: Iterable[Placement]) -> list[str]:
    """The messages of the ``Placement`` Events that carry the planner's prose of ``placements``
    (those whose recorded entry changed): a header line, then one ``name: prose`` line each, split
    so that no message exceeds :data:`MAX_EVENT_MESSAGE` characters (a longer line is cut)."""
    lines = [f"{p.name}: {p.reason}"[: MAX_EVENT_MESSAGE - 60] for p in placements if p.reason]
    chunks: list[list[str]] = []
    size = MAX_EVENT_MESSAGE
    for line in lines:
        if size + len(line) + 1 > MAX_EVENT_MESSAGE - 60:
            chunks.append([])
            size = 0
        chunks[-1].append(line)
        size += len(line) + 1
    return [
        f"{PLACEMENT_EVENT_HEADER} {len(lines)} models and judges ({i}/{len(chunks)}):\n" + "\n".join(chunk)
        for i, chunk in enumerate(chunks, start=1)
    ]


def placement_notes(messages: Iterable[str]) -> dict[str, str]:
    """The prose per name from ``Placement`` Event messages (:func:`placement_event_messages`),
    oldest first: a later Event's line replaces an earlier one's."""
    notes: dict[str, str] = {}
    for message in messages:
        head, _, body = message.partition("\n")
        if not head.startswith(PLACEMENT_EVENT_HEADER):
            continue
        for line in body.splitlines():
            name, sep, prose = line.partition(": ")
            if sep and name:
                notes[name] = prose
    return notes
