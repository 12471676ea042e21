"""What an EvalRun's author may reach: the chart's allow-lists and each run's own storage prefix.

Why this module exists: whoever may create an EvalRun is a tenant, not an admin (docs/security.md,
"Threat model"). A spec names storage roots, a Job image, PersistentVolumeClaims and model-server
flags; each of those is a door out of the namespace unless the chart opened it. This module holds
the one reading of the chart's allow-lists (:class:`TenantPolicy`, from ``KUBEJURY_ALLOWED_*``
variables the chart sets) and the one check of a spec against them (:func:`policy_problems`),
used by the admission webhook and by the reconcile (the webhook may be off). It also fixes where
a run's results live: ``<root>/<namespace>/<name>-<uid prefix>/`` (:func:`run_storage_uri`), so
same-named runs of two namespaces, or a deleted and re-created run, never share files, and
``cleanupPolicy: Delete`` can only remove the run's own prefix. Pure.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from kubejury.config.spec import FieldProblem

__all__ = [
    "DANGEROUS_SERVER_FLAGS",
    "TenantPolicy",
    "policy_problems",
    "run_storage_prefix",
    "run_storage_uri",
]

#: Model-server flags that widen what a tenant reaches (remote code in the server, which holds
#: ``HF_TOKEN``; files of the server's filesystem; where weights land). Each needs the chart's
#: ``security.allowedServerFlags``.
DANGEROUS_SERVER_FLAGS: tuple[str, ...] = (
    "--trust-remote-code",
    "--allowed-local-media-path",
    "--download-dir",
    "--model-loader-extra-config",
    "--path",  # llama.cpp: serve static files from a directory
    "--slot-save-path",  # llama.cpp: write KV-cache slots to a directory
)

UID_PREFIX_LENGTH = 8


def run_storage_prefix(namespace: str, name: str, uid: str) -> str:
    """``<namespace>/<name>-<first 8 characters of the uid>``: one run's own prefix under a root."""
    return f"{namespace}/{name}-{uid[:UID_PREFIX_LENGTH]}" if uid else f"{namespace}/{name}"


def run_storage_uri(root: str, namespace: str, name: str, uid: str) -> str:
    """The run's own storage URI below the root its spec names (``spec.storage.uri``)."""
    return f"{root.rstrip('/')}/{run_storage_prefix(namespace, name, uid)}"


def _normalized(uri: str) -> str | None:
    """``scheme://path`` without ``.``/``..``/``//`` segments; ``None`` for a path that climbs out."""
    scheme, sep, rest = uri.partition("://")
    if not sep:
        scheme, rest = "file", uri
    if any(part == ".." for part in rest.split("/")):
        return None
    path = posixpath.normpath(rest) if rest else ""
    path = "" if path == "." else path.rstrip("/")
    return f"{scheme.lower()}://{path}"


def _under(uri: str, root: str) -> bool:
    target, base = _normalized(uri), _normalized(root)
    if target is None or base is None:
        return False
    return target == base or target.startswith(base.rstrip("/") + "/")


def _image_allowed(image: str, allowed: tuple[str, ...]) -> bool:
    return any(image == a or (a.endswith("*") and image.startswith(a[:-1])) for a in allowed)


def _flag_name(arg: str) -> str:
    return arg.split("=", 1)[0]


def _list_env(env: Mapping[str, str], key: str) -> tuple[str, ...] | None:
    raw = env.get(key)
    if raw is None:
        return None
    if not raw.strip():
        return ()
    value = json.loads(raw)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{key} must be a JSON list of strings, got {raw!r}")
    return tuple(v for v in value if v)


@dataclass(frozen=True)
class TenantPolicy:
    """The chart's allow-lists. ``None`` means "not configured" (a local operator without the
    chart); the chart always sets every one, so in a cluster only what it lists is allowed."""

    storage_roots: tuple[str, ...] | None = None  # URIs; "{namespace}" is the run's namespace
    job_images: tuple[str, ...] | None = None  # exact references, or prefixes ending in "*"
    claims: tuple[str, ...] | None = None  # PersistentVolumeClaim names
    server_flags: tuple[str, ...] = ()  # entries of DANGEROUS_SERVER_FLAGS the chart allows

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TenantPolicy:
        return cls(
            storage_roots=_list_env(env, "KUBEJURY_ALLOWED_STORAGE_ROOTS"),
            job_images=_list_env(env, "KUBEJURY_ALLOWED_JOB_IMAGES"),
            claims=_list_env(env, "KUBEJURY_ALLOWED_CLAIMS"),
            server_flags=_list_env(env, "KUBEJURY_ALLOWED_SERVER_FLAGS") or (),
        )

    def roots_for(self, namespace: str) -> tuple[str, ...] | None:
        if self.storage_roots is None:
            return None
        return tuple(r.replace("{namespace}", namespace) for r in self.storage_roots)


def _entries(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    for key in ("models", "judges"):
        entries = spec.get(key)
        if isinstance(entries, list):
            for i, entry in enumerate(entries):
                if isinstance(entry, Mapping):
                    yield f"spec.{key}[{i}]", entry


def _claims(spec: Mapping[str, Any]) -> Iterator[tuple[str, str]]:
    """(field, claim name) for every PersistentVolumeClaim the spec would mount."""
    storage = spec.get("storage")
    if isinstance(storage, Mapping) and isinstance(storage.get("persistentVolumeClaim"), str):
        yield "spec.storage.persistentVolumeClaim", storage["persistentVolumeClaim"]
    cache = spec.get("modelCache")
    if isinstance(cache, Mapping) and isinstance(cache.get("claimName"), str):
        yield "spec.modelCache.claimName", cache["claimName"]
    for path, entry in _entries(spec):
        source = entry.get("source")
        if isinstance(source, str) and source.startswith("pvc://"):
            yield f"{path}.source", source.removeprefix("pvc://").split("/", 1)[0]


def policy_problems(body: Mapping[str, Any], policy: TenantPolicy) -> list[FieldProblem]:
    """Everything in the EvalRun that reaches beyond what the chart allows, each naming its field
    and the chart value that would allow it. Tolerant of a malformed body."""
    meta = body.get("metadata")
    namespace = str((meta.get("namespace") if isinstance(meta, Mapping) else None) or "default")
    raw = body.get("spec")
    spec: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    problems: list[FieldProblem] = []

    roots = policy.roots_for(namespace)
    storage = spec.get("storage")
    uri = storage.get("uri") if isinstance(storage, Mapping) else None
    if roots is not None and isinstance(uri, str) and not any(_under(uri, r) for r in roots):
        allowed = ", ".join(roots) if roots else "none"
        problems.append(
            FieldProblem(
                "spec.storage.uri",
                f"{uri} is not under a storage root the chart allows for namespace {namespace} "
                f"(allowed: {allowed}); add it to the chart value security.storageRoots",
            )
        )

    jobs = spec.get("jobs")
    image = jobs.get("image") if isinstance(jobs, Mapping) else None
    if (
        policy.job_images is not None
        and isinstance(image, str)
        and not _image_allowed(image, policy.job_images)
    ):
        problems.append(
            FieldProblem(
                "spec.jobs.image",
                f"image {image} is not allowed by the chart; add it to the chart value security.allowedJobImages",
            )
        )

    if policy.claims is not None:
        for path, claim in _claims(spec):
            if claim not in policy.claims:
                problems.append(
                    FieldProblem(
                        path,
                        f"PersistentVolumeClaim {claim} is not allowed by the chart; add it to the chart "
                        "value security.allowedClaims",
                    )
                )

    for path, entry in _entries(spec):
        args = entry.get("extraArgs")
        if not isinstance(args, list):
            continue
        for j, arg in enumerate(args):
            flag = _flag_name(arg) if isinstance(arg, str) else ""
            if flag in DANGEROUS_SERVER_FLAGS and flag not in policy.server_flags:
                problems.append(
                    FieldProblem(
                        f"{path}.extraArgs[{j}]",
                        f"server flag {flag} is not allowed by the chart; add it to the chart value "
                        "security.allowedServerFlags",
                    )
                )
    return problems
