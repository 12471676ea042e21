"""The nodes file: a Kubernetes ``NodeList`` (YAML or JSON, the shape of ``kubectl get nodes -o json``,
which says ``kind: List``).

Read once, checked, and turned into the Node objects the dev cluster creates. Fields that only a
server sets (uid, resourceVersion, managedFields, creation time) and the status a kubelet reports
(conditions, addresses, nodeInfo) are dropped, so the output of ``kubectl get nodes -o json`` from a
real cluster works as input; KWOK then plays the kubelet of every node. Bad input raises
:class:`NodesFileError` naming the file and the item.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

#: metadata fields a server sets; kept out of what we create.
_SERVER_METADATA = ("uid", "resourceVersion", "creationTimestamp", "managedFields", "generation", "selfLink")
#: status fields we keep: the resources. The rest is the kubelet's (KWOK's) to report.
_KEPT_STATUS = ("capacity", "allocatable")


class NodesFileError(ValueError):
    """The nodes file cannot be used; the message names the file and the offending item."""


def load_nodes(path: Path) -> list[dict[str, Any]]:
    """The Node objects to create from the NodeList in ``path``."""
    try:
        text = path.read_text()
    except OSError as error:
        raise NodesFileError(f"{path}: cannot read the nodes file: {error}") from error
    try:
        document: Any = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (json.JSONDecodeError, yaml.YAMLError) as error:
        raise NodesFileError(
            f"{path}: not valid {'JSON' if path.suffix == '.json' else 'YAML'}: {error}"
        ) from error
    # kubectl prints a multi-object result as kind List (of Nodes); the API's own type is NodeList.
    if not isinstance(document, Mapping) or document.get("kind") not in ("NodeList", "List"):
        raise NodesFileError(f"{path}: expected a NodeList (kind: NodeList or List, items: [...])")
    items = document.get("items")
    if not isinstance(items, list) or not items:
        raise NodesFileError(f"{path}: the NodeList has no items")
    nodes: list[dict[str, Any]] = []
    seen: set[str] = set()
    for index, item in enumerate(items):
        where = f"{path}: items[{index}]"
        if not isinstance(item, Mapping) or item.get("kind", "Node") != "Node":
            raise NodesFileError(f"{where}: expected a Node")
        metadata = item.get("metadata")
        name = metadata.get("name") if isinstance(metadata, Mapping) else None
        if not isinstance(name, str) or not name:
            raise NodesFileError(f"{where}: metadata.name is missing")
        if name in seen:
            raise NodesFileError(f"{where}: duplicate node name {name!r}")
        seen.add(name)
        nodes.append(_creatable(item, f"{path}: node {name!r}"))
    return nodes


def _creatable(item: Mapping[str, Any], where: str) -> dict[str, Any]:
    metadata = {k: v for k, v in dict(item["metadata"]).items() if k not in _SERVER_METADATA}
    for key in ("labels", "annotations"):
        value = metadata.get(key, {})
        if not isinstance(value, Mapping) or not all(isinstance(v, str) for v in value.values()):
            raise NodesFileError(f"{where}: metadata.{key} must map names to strings")
    spec = item.get("spec") or {}
    if not isinstance(spec, Mapping):
        raise NodesFileError(f"{where}: spec must be a mapping")
    status_in = item.get("status") or {}
    if not isinstance(status_in, Mapping):
        raise NodesFileError(f"{where}: status must be a mapping")
    status = {k: dict(status_in[k]) for k in _KEPT_STATUS if isinstance(status_in.get(k), Mapping)}
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata, "spec": dict(spec), "status": status}
