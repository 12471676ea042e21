"""The tenant policy a default install of the chart gives the operator, read from the chart itself.

Why this module exists: ``kubejury validate`` and ``kubejury plan --manifests`` preview what the
operator would admit and create. Without ``--settings`` they must refuse what a cluster installed
with the chart's defaults refuses (issue 28), and the chart's ``values.yaml`` must stay the one
source of those defaults. The chart turns its values into ``KUBEJURY_ALLOWED_*`` variables in
``templates/configmap.yaml``; :func:`policy_env` does the same few steps (list joins, ``uniq``,
``toJson``) for those variables only, and ``tests/unit/test_chart_defaults.py`` holds it to what
``helm template`` renders, for the default values and for values that take every branch. A new
``KUBEJURY_ALLOWED_*`` variable in the template fails that test until it is added here.

Where the chart is: the repository layout (``charts/kubejury`` two levels above this package),
which is what an editable install from a checkout has. A wheel does not carry the chart; there the
tools say so and ask for ``--settings`` (the settings ConfigMap of the cluster, or of
``helm template``), rather than guess a policy.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from kubejury.errors import InputError
from kubejury.safe_input import load_yaml

__all__ = ["CHART_DIR", "default_policy_env", "policy_env"]

#: The chart of the checkout this package runs from.
CHART_DIR = Path(__file__).resolve().parents[2] / "charts" / "kubejury"


def default_policy_env(chart_dir: Path = CHART_DIR) -> dict[str, str]:
    """The ``KUBEJURY_ALLOWED_*`` variables a default install of the chart at ``chart_dir`` sets."""
    return policy_env(_document(chart_dir / "values.yaml"), _document(chart_dir / "Chart.yaml"))


def policy_env(values: Mapping[str, Any], chart: Mapping[str, Any]) -> dict[str, str]:
    """The ``KUBEJURY_ALLOWED_*`` variables the settings ConfigMap holds for these (complete, merged)
    chart values and this ``Chart.yaml``: each a JSON list, as the template's ``toJson`` writes it."""
    security = _mapping(values, "security")
    storage = _mapping(values, "storage")
    model_cache = _mapping(values, "modelCache")
    roots = _strings(security, "storageRoots")
    claims = _strings(security, "allowedClaims")
    if storage.get("resultsClaimName"):
        roots.append(f"file://{storage.get('resultsMountPath')}")
        claims.append(str(storage["resultsClaimName"]))
    if model_cache.get("claimName"):
        claims.append(str(model_cache["claimName"]))
    images = [_chart_image(values, chart), *_strings(security, "allowedJobImages")]
    endpoints = _strings(security, "storageEndpoints")
    if storage.get("s3Endpoint"):
        endpoints.insert(0, str(storage["s3Endpoint"]))
    return {
        "KUBEJURY_ALLOWED_STORAGE_ROOTS": _to_json(_uniq(roots)),
        "KUBEJURY_ALLOWED_JOB_IMAGES": _to_json(_uniq(images)),
        "KUBEJURY_ALLOWED_CLAIMS": _to_json(_uniq(claims)),
        "KUBEJURY_ALLOWED_SERVER_FLAGS": _to_json(_strings(security, "allowedServerFlags")),
        "KUBEJURY_ALLOWED_STORAGE_ENDPOINTS": _to_json(_uniq(endpoints)),
        "KUBEJURY_ALLOWED_NODE_SELECTOR_KEYS": _to_json(_strings(security, "allowedNodeSelectorKeys")),
    }


def _chart_image(values: Mapping[str, Any], chart: Mapping[str, Any]) -> str:
    """The template's ``kubejury.image``: ``repository@digest``, else ``repository:tag`` (tag
    defaulting to the chart's appVersion)."""
    image = _mapping(values, "image")
    repository = image.get("repository")
    if image.get("digest"):
        return f"{repository}@{image['digest']}"
    return f"{repository}:{image.get('tag') or chart.get('appVersion')}"


def _document(path: Path) -> Mapping[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            str(path),
            "the chart's default policy is read from this file, which this installation does not have "
            "(it is in a checkout of the repository, not in a wheel); pass --settings FILE: the "
            "settings ConfigMap of your cluster (kubectl get cm <release>-kubejury-settings -o yaml) "
            "or of `helm template`",
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(str(path), f"cannot read: {exc}") from exc
    data, _ = load_yaml(text, str(path))
    if not isinstance(data, Mapping):
        raise InputError(str(path), "expected a mapping of chart values")
    return data


def _mapping(values: Mapping[str, Any], key: str) -> Mapping[str, Any]:
    value = values.get(key)
    return value if isinstance(value, Mapping) else {}


def _strings(values: Mapping[str, Any], key: str) -> list[str]:
    value = values.get(key)
    return [str(item) for item in value] if isinstance(value, list) else []


def _uniq(items: Iterable[str]) -> list[str]:
    """Sprig's ``uniq``: the first of each value, in order."""
    return list(dict.fromkeys(items))


def _to_json(value: list[str]) -> str:
    """Go's ``json.Marshal`` (helm's ``toJson``): compact, with ``<``, ``>``, ``&`` and the two
    Unicode line separators escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    for char in ("<", ">", "&", "\u2028", "\u2029"):
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text
