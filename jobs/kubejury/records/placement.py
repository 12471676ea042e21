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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any


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
        """The entry the operator writes under ``status.placement.<name>`` (JSON-safe)."""
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
        """A placement recorded by :meth:`to_json` (``name``: the key it was recorded under)."""
        return cls(
            name=name,
            runtime=str(data.get("runtime", "")),
            quantization=str(data.get("quantization", "")),
            tensor_parallel_size=int(data.get("tensorParallelSize", 0) or 0),
            node_selector={str(k): str(v) for k, v in (data.get("nodeSelector") or {}).items()},
            tolerations=tuple(dict(t) for t in data.get("tolerations") or ()),
            vllm_args=tuple(str(a) for a in data.get("vllmArgs") or ()),
            schedulable=bool(data.get("schedulable", True)),
            reason=str(data.get("reason", "")),
            gpu_product=data.get("gpuProduct"),
        )
