"""GPU and CPU nodes as placement sees them: parsed from Node objects, grouped into pools.

Reads what NVIDIA GPU Feature Discovery (GFD) puts on GPU nodes — ``nvidia.com/gpu.product``,
``nvidia.com/gpu.memory`` (MiB per GPU), ``nvidia.com/gpu.count``, compute capability from
``nvidia.com/gpu.compute.major``/``.minor`` or ``nvidia.com/cuda.compute.major``/``.minor`` — and
allocatable ``nvidia.com/gpu``. ``nvidia.com/gpu.family`` is deliberately ignored (older GFD
releases say "undefined" on Blackwell). When a node lacks the compute-capability or memory labels,
:data:`KNOWN_GPUS` fills them in. Pure: the input is ``kubectl get nodes -o json`` data.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kubejury.errors import InputError
from kubejury.safe_input import load_yaml, loads_json

GPU_RESOURCE = "nvidia.com/gpu"
LABEL_REPLICAS = "nvidia.com/gpu.replicas"  # GFD: > 1 when each GPU is advertised as several (sharing)
LABEL_SHARING = "nvidia.com/gpu.sharing-strategy"  # GFD: none | time-slicing | mps
LABEL_MIG_STRATEGY = "nvidia.com/mig.strategy"  # GFD: none | single | mixed
SHARED_SUFFIX = "-SHARED"  # GFD renames the product of shared GPUs (time-slicing, MPS)
_MIG_PRODUCT = re.compile(r"-MIG-(\d+)g\.(\d+)gb", re.IGNORECASE)  # GFD, mig.strategy single
LABEL_PRODUCT = "nvidia.com/gpu.product"
LABEL_MEMORY = "nvidia.com/gpu.memory"
LABEL_COUNT = "nvidia.com/gpu.count"
CC_LABELS: tuple[tuple[str, str], ...] = (
    ("nvidia.com/gpu.compute.major", "nvidia.com/gpu.compute.minor"),
    ("nvidia.com/cuda.compute.major", "nvidia.com/cuda.compute.minor"),
)

GIB = float(1 << 30)

#: Known products: (substring of the GFD product label, lower case) → (CC, MiB per GPU).
#: Only used when a node lacks the compute-capability or memory labels. Longest match wins.
KNOWN_GPUS: dict[str, tuple[tuple[int, int], int]] = {
    "h100": ((9, 0), 81559),
    "h100-nvl": ((9, 0), 95830),
    "h200": ((9, 0), 143771),
    "gh200": ((9, 0), 97871),
    "h800": ((9, 0), 81559),
    "b200": ((10, 0), 183359),
    "gb200": ((10, 0), 189471),
    "b300": ((10, 3), 275040),
    "rtx-pro-6000-blackwell": ((12, 0), 97887),
    "l40s": ((8, 9), 46068),
    "l40": ((8, 9), 46068),
    "l4": ((8, 9), 23034),
    "rtx-6000-ada": ((8, 9), 49140),
    "a100-sxm4-40gb": ((8, 0), 40960),
    "a100-pcie-40gb": ((8, 0), 40960),
    "a100-sxm4-80gb": ((8, 0), 81920),
    "a100-80gb": ((8, 0), 81920),
    "a100": ((8, 0), 40960),
    "a800": ((8, 0), 81920),
    "a30": ((8, 0), 24576),
    "a10g": ((8, 6), 23028),
    "a10": ((8, 6), 23028),
    "a40": ((8, 6), 46068),
    "rtx-a6000": ((8, 6), 49140),
    "t4": ((7, 5), 15360),
    "v100": ((7, 0), 16384),
}


@dataclass(frozen=True)
class NodeInfo:
    """What placement needs to know about one Kubernetes node."""

    name: str
    labels: Mapping[str, str]
    gpus: int  # allocatable nvidia.com/gpu (0: a CPU node)
    gpu_product: str | None = None
    gpu_memory_mib: int | None = None
    compute_capability: tuple[int, int] | None = None
    memory_bytes: int | None = None  # allocatable memory
    taints: tuple[Mapping[str, Any], ...] = ()
    unschedulable: bool = False
    # How one allocatable nvidia.com/gpu maps to hardware: None (a whole GPU), "time-slicing" or
    # "mps" (a replica of a shared GPU: several Pods on one GPU), "mig" (a MIG slice).
    gpu_sharing: str | None = None

    @property
    def undescribed_gpus(self) -> bool:
        """Allocatable GPUs but no product or memory per GPU: GFD (or the user's labels) missing."""
        return self.gpus > 0 and not self.gpu_memory_mib


@dataclass(frozen=True)
class GpuPool:
    """GPU nodes that look the same to placement: product, memory per GPU and GPUs per node."""

    product: str
    memory_mib: int
    gpus_per_node: int
    compute_capability: tuple[int, int] | None
    nodes: tuple[NodeInfo, ...]
    sharing: str | None = None  # NodeInfo.gpu_sharing of every node in the pool

    @property
    def memory_gib(self) -> float:
        return self.memory_mib * (1 << 20) / GIB

    @property
    def cc_text(self) -> str:
        cc = self.compute_capability
        return f"{cc[0]}.{cc[1]}" if cc else "unknown"

    @property
    def whole_gpus(self) -> bool:
        """Whether each allocatable GPU is a whole physical GPU (tensor parallelism needs that)."""
        return self.sharing is None

    def describe(self) -> str:
        shared = {"mig": ", MIG slices", "mps": ", shared by MPS", "time-slicing": ", time-sliced"}
        return (
            f"{self.gpus_per_node} × {self.product} ({self.memory_gib:.1f} GiB, CC {self.cc_text}"
            f"{shared.get(self.sharing or '', '')})"
        )


_QUANTITY = re.compile(r"^([0-9.]+)([a-zA-Z]*)$")
_SUFFIX = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 1 << 10,
    "Mi": 1 << 20,
    "Gi": 1 << 30,
    "Ti": 1 << 40,
    "Pi": 1 << 50,
    "m": 1e-3,
}


def parse_quantity(text: object) -> float | None:
    """A Kubernetes quantity ("64Gi", "500m", "8") as a number; ``None`` when unreadable."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    if not isinstance(text, str):
        return None
    match = _QUANTITY.match(text.strip())
    if not match or match[2] not in _SUFFIX:
        return None
    try:
        return float(match[1]) * _SUFFIX[match[2]]
    except ValueError:
        return None


def _int_label(labels: Mapping[str, str], key: str) -> int | None:
    try:
        return int(labels[key])
    except (KeyError, ValueError, TypeError):
        return None


def known_gpu(product: str | None) -> tuple[tuple[int, int], int] | None:
    """(compute capability, MiB) of a product from :data:`KNOWN_GPUS` (longest substring match)."""
    if not product:
        return None
    text = product.lower().replace(" ", "-")
    matches = [key for key in KNOWN_GPUS if key in text]
    if not matches:
        return None
    return KNOWN_GPUS[max(matches, key=len)]


def _object(parent: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    """``parent[key]`` when it is an object (or absent: empty); else a ValueError naming it."""
    value = parent.get(key) or {}
    if not isinstance(value, Mapping):
        raise ValueError(f"{where}.{key} must be an object, got {type(value).__name__} {value!r:.40}")
    return value


def parse_node(obj: Mapping[str, Any], where: str = "node") -> NodeInfo:
    """A :class:`NodeInfo` from a Node object (as ``kubectl get node -o json`` prints it).

    A part of the wrong type (``status: "x"``) is a ValueError naming it (``where`` prefixes it).
    """
    metadata = _object(obj, "metadata", where)
    labels = {str(k): str(v) for k, v in _object(metadata, "labels", f"{where}.metadata").items()}
    status = _object(obj, "status", where)
    allocatable = _object(status, "allocatable", f"{where}.status")
    spec = _object(obj, "spec", where)
    if not isinstance(spec.get("taints") or [], list):
        raise ValueError(f"{where}.spec.taints must be a list")
    gpus_alloc = parse_quantity(allocatable.get(GPU_RESOURCE))
    gpus = int(gpus_alloc) if gpus_alloc is not None else 0
    product = labels.get(LABEL_PRODUCT)
    if gpus == 0 and allocatable.get(GPU_RESOURCE) is None and product:
        gpus = _int_label(labels, LABEL_COUNT) or 0  # no device plugin data: trust GFD's count
    cc: tuple[int, int] | None = None
    for major_key, minor_key in CC_LABELS:
        major, minor = _int_label(labels, major_key), _int_label(labels, minor_key)
        if major is not None:
            cc = (major, minor or 0)
            break
    memory_mib = _int_label(labels, LABEL_MEMORY)
    sharing = gpu_sharing(labels, product)
    mig = _MIG_PRODUCT.search(product or "")
    if mig and memory_mib is None:
        memory_mib = int(mig[2]) * 1000  # the profile's "<n>gb", a little under n GiB
    known = known_gpu(product)
    if known is not None:
        cc = cc or known[0]
        memory_mib = memory_mib or known[1]  # a MIG slice's memory never comes from here: set above
    replicas = _int_label(labels, LABEL_REPLICAS) or 1
    if sharing in ("time-slicing", "mps") and memory_mib and replicas > 1:
        memory_mib //= replicas  # replicas share one GPU's memory: each can count on its share only
    memory = parse_quantity(allocatable.get("memory"))
    taints = tuple(t for t in (spec.get("taints") or []) if isinstance(t, Mapping))
    return NodeInfo(
        name=str(metadata.get("name", "")),
        labels=labels,
        gpus=gpus if product or gpus else 0,
        gpu_product=product if gpus else None,
        gpu_memory_mib=memory_mib if gpus else None,
        compute_capability=cc if gpus else None,
        memory_bytes=int(memory) if memory is not None else None,
        taints=taints,
        unschedulable=bool(spec.get("unschedulable", False)),
        gpu_sharing=sharing if gpus else None,
    )


def gpu_sharing(labels: Mapping[str, str], product: str | None) -> str | None:
    """How the node's allocatable ``nvidia.com/gpu`` maps to hardware, from GFD's labels:
    ``"mig"`` (product ``…-MIG-<profile>``, MIG strategy single), ``"time-slicing"`` or ``"mps"``
    (``nvidia.com/gpu.sharing-strategy``, ``nvidia.com/gpu.replicas`` > 1 or a ``-SHARED``
    product), ``None`` for whole GPUs."""
    if product and _MIG_PRODUCT.search(product):
        return "mig"
    strategy = labels.get(LABEL_SHARING, "").lower()
    if strategy in ("time-slicing", "mps"):
        return strategy
    if (_int_label(labels, LABEL_REPLICAS) or 1) > 1 or (product or "").upper().endswith(SHARED_SUFFIX):
        return "time-slicing"
    return None


def parse_node_list(data: object) -> list[NodeInfo]:
    """Nodes from ``kubectl get nodes -o json`` (a ``List``/``NodeList``), one Node, or a list of Nodes."""
    items = (data.get("items") if "items" in data else [data]) if isinstance(data, Mapping) else data
    if not isinstance(items, list):
        raise ValueError("expected a Kubernetes List of Node objects (kubectl get nodes -o json)")
    nodes = []
    for i, item in enumerate(items):
        if not isinstance(item, Mapping) or item.get("kind", "Node") != "Node":
            raise ValueError(f"items[{i}] is not a Node")
        nodes.append(parse_node(item, f"items[{i}]"))
    return nodes


class NodesFileError(InputError):
    """A nodes file (``kubectl get nodes -o json|yaml``) that cannot be used."""


def read_nodes_document(text: str, source: str) -> Any:
    """A nodes file's text parsed as JSON, else YAML, within :mod:`kubejury.safe_input`'s limits."""
    try:
        return loads_json(text, source)
    except json.JSONDecodeError as json_error:
        try:
            data, _ = load_yaml(text, source)  # kubectl get nodes -o yaml works too
        except InputError as yaml_error:
            if text.lstrip().startswith(("{", "[")):
                raise NodesFileError(
                    source,
                    f"not valid JSON: {json_error.msg} (save it with `kubectl get nodes -o json`)",
                    location=f"line {json_error.lineno}, column {json_error.colno}",
                ) from None
            raise NodesFileError(source, yaml_error.detail, location=yaml_error.location) from None
        return data
    except InputError as exc:
        raise NodesFileError(source, exc.detail, location=exc.location) from None


def load_nodes_text(text: str, source: str) -> list[NodeInfo]:
    """The nodes of a nodes file's text (JSON or YAML); any problem is a :class:`NodesFileError`."""
    data = read_nodes_document(text, source)
    try:
        return parse_node_list(data)
    except ValueError as exc:
        raise NodesFileError(source, str(exc)) from None


def blocking_taints(node: NodeInfo) -> list[Mapping[str, Any]]:
    return [t for t in node.taints if t.get("effect") in ("NoSchedule", "NoExecute")]


def gpu_pools(nodes: Iterable[NodeInfo]) -> list[GpuPool]:
    """Schedulable GPU nodes grouped by (product, memory, GPUs per node), largest GPUs first."""
    groups: dict[tuple[str, int, int, str], list[NodeInfo]] = {}
    for node in nodes:
        if node.unschedulable or node.gpus <= 0 or not node.gpu_memory_mib:
            continue
        key = (node.gpu_product or "unknown-gpu", node.gpu_memory_mib, node.gpus, node.gpu_sharing or "")
        groups.setdefault(key, []).append(node)
    pools = []
    for (product, memory, count, sharing), members in groups.items():
        ccs = {n.compute_capability for n in members if n.compute_capability}
        cc = min(ccs) if ccs else None
        ordered = tuple(sorted(members, key=lambda n: n.name))
        pools.append(GpuPool(product, memory, count, cc, ordered, sharing or None))
    return sorted(pools, key=lambda p: (-p.memory_mib, -p.gpus_per_node, p.product))


def first_few(items: Sequence[str], separator: str, limit: int = 5) -> str:
    """The first ``limit`` items joined, and how many more there are."""
    more = f" and {len(items) - limit} more" if len(items) > limit else ""
    return separator.join(items[:limit]) + more


def undescribed_gpu_text(nodes: Iterable[NodeInfo]) -> str:
    """A sentence naming nodes with GPUs placement cannot use because nothing describes them
    (no NVIDIA GPU Feature Discovery), and how to describe them; empty when there are none."""
    names = sorted(n.name for n in nodes if n.undescribed_gpus and not n.unschedulable)
    if not names:
        return ""
    shown = first_few(names, ", ")
    return (
        f" Node(s) {shown} have allocatable {GPU_RESOURCE} but no {LABEL_PRODUCT} and {LABEL_MEMORY} "
        "labels (NVIDIA GPU Feature Discovery is not running there), so placement cannot use them; "
        "install GPU Feature Discovery, or describe the GPUs with those labels yourself, e.g. "
        f"`kubectl label node {names[0]} {LABEL_PRODUCT}=NVIDIA-L4 {LABEL_MEMORY}=23034` "
        "(MiB per GPU; see docs/placement.md)."
    )


def cpu_nodes(nodes: Iterable[NodeInfo]) -> list[NodeInfo]:
    """Schedulable nodes without GPUs that accept ordinary Pods (no NoSchedule/NoExecute taints)."""
    return [n for n in nodes if n.gpus <= 0 and not n.unschedulable and not blocking_taints(n)]


def pool_node_selector(pool: GpuPool, pools: Sequence[GpuPool]) -> dict[str, str]:
    selector = {LABEL_PRODUCT: pool.product}
    if sum(1 for p in pools if p.product == pool.product) > 1:
        # the label as the nodes carry it (a shared pool's memory_mib is a replica's share)
        selector[LABEL_MEMORY] = pool.nodes[0].labels.get(LABEL_MEMORY, str(pool.memory_mib))
        if sum(1 for p in pools if (p.product, p.memory_mib) == (pool.product, pool.memory_mib)) > 1:
            selector[LABEL_COUNT] = str(pool.gpus_per_node)
    return selector


Toleration = Mapping[str, Any]  # a Pod toleration, as the chart lists them (KUBEJURY_GPU_TOLERATIONS)
GPU_TOLERATIONS_ENV = "KUBEJURY_GPU_TOLERATIONS"  # the chart's inference.gpuTolerations, as JSON


def chart_tolerations_from_env(env: Mapping[str, str]) -> tuple[Toleration, ...]:
    """The tolerations the chart gives model servers on GPU nodes (``KUBEJURY_GPU_TOLERATIONS``, a
    JSON list of objects); none when unset or empty. Anything else is a ValueError naming it."""
    raw = env.get(GPU_TOLERATIONS_ENV)
    if not raw:
        return ()
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{GPU_TOLERATIONS_ENV} is not JSON: {exc.msg} ({raw!r:.60})") from None
    if not isinstance(value, list):
        raise ValueError(f"{GPU_TOLERATIONS_ENV} must be a JSON list, got {raw!r:.60}")
    for i, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ValueError(f"{GPU_TOLERATIONS_ENV}[{i}] must be an object, got {item!r:.40}")
    return tuple(value)


def is_gpu_taint(taint: Mapping[str, Any]) -> bool:
    """Whether ``taint`` is the GPU taint (key ``nvidia.com/gpu``, any value and effect): the one
    taint placement tolerates on its own, since GPU nodes carry it to keep other Pods off."""
    return str(taint.get("key", "")) == GPU_RESOURCE


def tolerates(toleration: Toleration, taint: Mapping[str, Any]) -> bool:
    """Whether ``toleration`` tolerates ``taint``, by Kubernetes' rule: the effects match (an empty
    effect matches all), and either the keys match with ``Exists`` or an equal value (``Equal``, the
    default operator), or the key is empty and the operator ``Exists`` (every taint)."""
    effect = str(toleration.get("effect") or "")
    if effect and effect != str(taint.get("effect") or ""):
        return False
    key = str(toleration.get("key") or "")
    operator = str(toleration.get("operator") or "Equal")
    if not key:
        return operator == "Exists"
    if key != str(taint.get("key") or ""):
        return False
    if operator == "Exists":
        return True
    return operator == "Equal" and str(toleration.get("value") or "") == str(taint.get("value") or "")


def untolerated_taints(node: NodeInfo, chart_tolerations: Sequence[Toleration]) -> list[Mapping[str, Any]]:
    """The node's NoSchedule/NoExecute taints that are neither the GPU taint nor tolerated by the
    chart's tolerations: a team's reservation, the control plane, a node not ready. A Pod placed
    there would stay Pending, so placement does not choose such a node."""
    return [
        taint
        for taint in blocking_taints(node)
        if not is_gpu_taint(taint) and not any(tolerates(t, taint) for t in chart_tolerations)
    ]


def usable_gpu_nodes(nodes: Iterable[NodeInfo], chart_tolerations: Sequence[Toleration]) -> list[NodeInfo]:
    """The nodes whose every blocking taint is the GPU taint or one the chart tolerates."""
    return [n for n in nodes if not untolerated_taints(n, chart_tolerations)]


def taint_text(taint: Mapping[str, Any]) -> str:
    """``key=value:Effect`` (``key:Effect`` without a value), as ``kubectl taint`` spells it."""
    value = taint.get("value")
    key = f"{taint.get('key', '')}={value}" if value not in (None, "") else str(taint.get("key", ""))
    return f"{key}:{taint.get('effect', '')}"


def reserved_gpu_text(nodes: Iterable[NodeInfo], chart_tolerations: Sequence[Toleration]) -> str:
    """A sentence naming GPU nodes placement leaves alone because of a taint the chart does not
    tolerate, and how an administrator may allow them; empty when there are none."""
    reserved = {
        n.name: untolerated_taints(n, chart_tolerations)
        for n in sorted(nodes, key=lambda n: n.name)
        if n.gpus > 0 and not n.unschedulable
    }
    named = [
        f"{name} ({', '.join(taint_text(t) for t in taints)})" for name, taints in reserved.items() if taints
    ]
    if not named:
        return ""
    shown = first_few(named, "; ")
    return (
        f" GPU node(s) {shown} carry taints that only the GPU taint ({GPU_RESOURCE}) and the chart's "
        "tolerations may pass, so placement does not use them; an administrator who wants EvalRuns "
        "there lists a toleration in the chart's inference.gpuTolerations."
    )


def _toleration_of(taint: Mapping[str, Any]) -> dict[str, Any]:
    """The exact toleration of one taint: ``Equal`` to its value, ``Exists`` when it has none."""
    key, effect, value = str(taint.get("key", "")), str(taint.get("effect", "")), taint.get("value")
    if value in (None, ""):
        return {"key": key, "effect": effect, "operator": "Exists"}
    return {"key": key, "effect": effect, "operator": "Equal", "value": str(value)}


def tolerations_for(
    nodes: Iterable[NodeInfo], chart_tolerations: Sequence[Toleration] = ()
) -> list[dict[str, Any]]:
    """What a Pod on these nodes tolerates: the GPU taint as the nodes carry it, and the chart's
    tolerations that one of their taints needs. Never anything else: another team's reservation
    or the control plane stays closed unless the chart lists it (such nodes are not chosen)."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for node in nodes:
        for taint in blocking_taints(node):
            if is_gpu_taint(taint):
                toleration = _toleration_of(taint)
            else:
                listed = next((t for t in chart_tolerations if tolerates(t, taint)), None)
                if listed is None:
                    continue
                toleration = dict(listed)
            order = (str(toleration.get("key", "")), str(toleration.get("effect", "")))
            found.setdefault((*order, json.dumps(toleration, sort_keys=True)), toleration)
    return [found[k] for k in sorted(found)]


def matches_selector(node: NodeInfo, selector: Mapping[str, str]) -> bool:
    """Whether the node carries every label of ``selector`` (a model's ``nodeSelector``)."""
    return all(node.labels.get(k) == v for k, v in selector.items())
