"""Admission validation of EvalRuns: what the CRD schema cannot say, with the field in every message.

The CRD's structural schema checks shapes and enums. This module adds what needs more than one
field or a look at the cluster: unique model/judge/series names, at least one judge, a weight for
every level asked, explicit quantization compatible with runtime and checkpoint (all shared with
``kubejury validate`` through :func:`kubejury.config.spec.evalrun_problems`), a run that names
itself in ``spec.reuse.from`` (it needs the object's own name), and the chart's allow-lists (:mod:`kubejury_operator.tenancy`: storage roots and what is read from them, storage
endpoints, Job images, claims, server flags, node-selector keys), checked on the parsed spec.

The webhook does not check that referenced Secrets exist: its answer would tell a user who may
not read Secrets whether one exists (issue 11, finding 6). ``secrets_present`` remains for callers
that may read them (``kubejury validate`` against a cluster as its own user, tests).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from kubejury.config.spec import FieldProblem, evalrun_problems
from kubejury_operator.tenancy import TenantPolicy, run_policy_problems
from kubejury_operator.vocabulary import namespace_of

__all__ = [
    "STORAGE_SECRET_KEYS",
    "FieldProblem",
    "SecretsPresent",
    "admission_message",
    "validate_evalrun",
]

#: ``secrets_present(name, key)``: whether the Secret ``name`` in the EvalRun's namespace exists
#: and has ``key``. The caller binds the namespace.
SecretsPresent = Callable[[str, str], bool]

#: Keys a ``spec.storage.credentialsSecretRef`` Secret must carry.
STORAGE_SECRET_KEYS: tuple[str, ...] = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")


def _secret_refs(spec: Mapping[str, Any]) -> Iterator[tuple[str, str, str]]:
    """(field path, secret name, key) for every Secret the spec references; tolerant of bad input."""
    for key in ("models", "judges"):
        entries = spec.get(key)
        if not isinstance(entries, list):
            continue
        for i, entry in enumerate(entries):
            ref = entry.get("apiKeySecretRef") if isinstance(entry, Mapping) else None
            if (
                isinstance(ref, Mapping)
                and isinstance(ref.get("name"), str)
                and isinstance(ref.get("key"), str)
            ):
                yield f"spec.{key}[{i}].apiKeySecretRef", ref["name"], ref["key"]
    ref = spec.get("hfTokenSecretRef")
    if isinstance(ref, Mapping) and isinstance(ref.get("name"), str) and isinstance(ref.get("key"), str):
        yield "spec.hfTokenSecretRef", ref["name"], ref["key"]
    storage = spec.get("storage")
    ref = storage.get("credentialsSecretRef") if isinstance(storage, Mapping) else None
    if isinstance(ref, Mapping) and isinstance(ref.get("name"), str):
        for secret_key in STORAGE_SECRET_KEYS:
            yield "spec.storage.credentialsSecretRef", ref["name"], secret_key


def _secret_problems(spec: Mapping[str, Any], secrets_present: SecretsPresent) -> list[FieldProblem]:
    problems = []
    for path, name, key in _secret_refs(spec):
        if not secrets_present(name, key):
            problems.append(
                FieldProblem(
                    path,
                    f"Secret {name!r} with key {key!r} not found in the EvalRun's namespace; create it first "
                    f"(kubectl create secret generic {name} --from-literal={key}=…)",
                )
            )
    return problems


def _self_reuse_problems(body: Mapping[str, Any]) -> list[FieldProblem]:
    """``spec.reuse.from[i]`` naming the EvalRun itself: a run cannot copy what it has not made."""
    meta, spec = body.get("metadata"), body.get("spec")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    reuse = spec.get("reuse") if isinstance(spec, Mapping) else None
    names = reuse.get("from") if isinstance(reuse, Mapping) else None
    if not isinstance(name, str) or not isinstance(names, list):
        return []
    return [
        FieldProblem(f"spec.reuse.from[{i}]", f"{name!r} is this EvalRun itself; a run cannot reuse itself")
        for i, source in enumerate(names)
        if source == name
    ]


def validate_evalrun(
    body: Mapping[str, Any],
    *,
    secrets_present: SecretsPresent | None = None,
    policy: TenantPolicy | None = None,
) -> list[FieldProblem]:
    """Every problem of an EvalRun object (as the API server sends it), each naming its field.

    ``secrets_present`` is consulted for every referenced Secret key; ``None`` skips that check
    (e.g. a dry run without cluster access). An empty list means the EvalRun is admissible.
    """
    run, problems = evalrun_problems(body)
    problems.extend(_self_reuse_problems(body))
    if policy is not None and run is not None:  # the policy reads the parsed spec, as rendered
        problems.extend(run_policy_problems(run, namespace_of(body), policy))
    spec = body.get("spec")
    if secrets_present is not None and isinstance(spec, Mapping):
        problems.extend(p for p in _secret_problems(spec, secrets_present) if p not in problems)
    return problems


def admission_message(problems: Sequence[FieldProblem], limit: int = 20) -> str:
    """One message for an admission rejection (kubectl prints it to the user)."""
    shown = [str(p) for p in problems[:limit]]
    if len(problems) > limit:
        shown.append(f"… and {len(problems) - limit} more")
    return "invalid EvalRun: " + "; ".join(shown)
