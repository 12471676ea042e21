"""What an EvalRun's author may reach: the chart's allow-lists and each run's own storage prefix.

Why this module exists: whoever may create an EvalRun is a tenant, not an admin (docs/security.md,
"Threat model"). A spec names storage roots, a Job image, PersistentVolumeClaims and model-server
flags; each of those is a door out of the namespace unless the chart opened it. This module holds
the one reading of the chart's allow-lists (:class:`TenantPolicy`, from ``KUBEJURY_ALLOWED_*``
variables the chart sets) and the one check of a parsed spec against them
(:func:`run_policy_problems`; :func:`policy_problems` parses a body first), used by the admission
webhook, the reconcile (the webhook may be off) and the preview commands. It also fixes where
a run's results live: ``<root>/<namespace>/<name>-<uid prefix>/`` (:func:`run_storage_uri`), so
same-named runs of two namespaces, or a deleted and re-created run, never share files, and
``cleanupPolicy: Delete`` can only remove the run's own prefix. Pure.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from kubejury.config.spec import EvalRun, EvalRunSpec, FieldProblem, ModelSpec, evalrun_problems
from kubejury.runtimes import LLAMACPP, VLLM
from kubejury_operator.vocabulary import namespace_of

__all__ = [
    "SERVER_FLAGS",
    "TenantPolicy",
    "canonical_flag",
    "endpoint_listed",
    "policy_problems",
    "run_policy_problems",
    "run_storage_prefix",
    "run_storage_uri",
    "server_arg_problems",
]

#: Model-server flags a run may pass in ``extraArgs`` without the chart, per runtime: tuning knobs
#: whose values are numbers, sizes or names of built-in choices. Each maps to whether it takes a
#: value. Everything else (remote code, files and directories of the server, other weights, flags
#: that load more flags, plugins, logs) needs the chart's ``security.allowedServerFlags``: an
#: allow-list, because a deny-list was bypassed by every spelling argparse accepts (issue 29).
SERVER_FLAGS: Mapping[str, Mapping[str, bool]] = {
    VLLM.name: {
        "--max-num-seqs": True,
        "--max-num-batched-tokens": True,
        "--max-seq-len-to-capture": True,
        "--max-logprobs": True,
        "--kv-cache-dtype": True,
        "--dtype": True,
        "--block-size": True,
        "--swap-space": True,
        "--cpu-offload-gb": True,
        "--seed": True,
        "--tokenizer-mode": True,
        "--reasoning-parser": True,
        "--tool-call-parser": True,
        "--pipeline-parallel-size": True,
        "--data-parallel-size": True,
        "--limit-mm-per-prompt": True,
        "--rope-theta": True,
        "--max-parallel-loading-workers": True,
        "--attention-backend": True,
        "--enforce-eager": False,
        "--enable-prefix-caching": False,
        "--no-enable-prefix-caching": False,
        "--enable-chunked-prefill": False,
        "--no-enable-chunked-prefill": False,
        "--enable-expert-parallel": False,
        "--enable-auto-tool-choice": False,
        "--disable-custom-all-reduce": False,
        "--disable-sliding-window": False,
        "--disable-log-stats": False,
        "--disable-log-requests": False,
        "--async-scheduling": False,
    },
    LLAMACPP.name: {
        "--threads": True,
        "-t": True,
        "--threads-batch": True,
        "-tb": True,
        "--threads-http": True,
        "--batch-size": True,
        "-b": True,
        "--ubatch-size": True,
        "-ub": True,
        "--parallel": True,
        "-np": True,
        "--n-gpu-layers": True,
        "--gpu-layers": True,
        "-ngl": True,
        "--split-mode": True,
        "-sm": True,
        "--main-gpu": True,
        "-mg": True,
        "--tensor-split": True,
        "-ts": True,
        "--cache-type-k": True,
        "-ctk": True,
        "--cache-type-v": True,
        "-ctv": True,
        "--flash-attn": True,
        "-fa": True,
        "--rope-scaling": True,
        "--rope-freq-base": True,
        "--rope-freq-scale": True,
        "--defrag-thold": True,
        "-dt": True,
        "--seed": True,
        "-s": True,
        "--reasoning-format": True,
        "--reasoning-budget": True,
        "--cache-reuse": True,
        "--n-predict": True,
        "-n": True,
        "--keep": True,
        "--timeout": True,
        "-to": True,
        "--cont-batching": False,
        "-cb": False,
        "--no-cont-batching": False,
        "-nocb": False,
        "--mlock": False,
        "--no-mmap": False,
        "--no-warmup": False,
        "--no-webui": False,
        "--metrics": False,
        "--no-kv-offload": False,
        "-nkvo": False,
        "--swa-full": False,
        "--kv-unified": False,
        "--no-context-shift": False,
        "--context-shift": False,
    },
}

#: Node labels a spec may select on (``nodeSelector``) when the chart says nothing more: what a
#: GPU or an architecture is. A team's reservation label is not among them (issue 29, finding 5).
DEFAULT_NODE_SELECTOR_KEYS: tuple[str, ...] = (
    "nvidia.com/gpu.product",
    "nvidia.com/gpu.memory",
    "nvidia.com/gpu.family",
    "kubernetes.io/arch",
    "kubernetes.io/os",
    "node.kubernetes.io/instance-type",
    "topology.kubernetes.io/region",
    "topology.kubernetes.io/zone",
)

UID_PREFIX_LENGTH = 8
_NEGATIVE_NUMBER = re.compile(r"^-[0-9.]+$")
_WHITESPACE = re.compile(r"\s")


def run_storage_prefix(namespace: str, name: str, uid: str) -> str:
    """``<namespace>/<name>-<first 8 characters of the uid>``: one run's own prefix under a root."""
    return f"{namespace}/{name}-{uid[:UID_PREFIX_LENGTH]}" if uid else f"{namespace}/{name}"


def run_storage_uri(root: str, namespace: str, name: str, uid: str) -> str:
    """The run's own storage URI below the root its spec names (``spec.storage.uri``)."""
    return f"{root.rstrip('/')}/{run_storage_prefix(namespace, name, uid)}"


def _normalized(uri: str) -> str | None:
    """``scheme://path`` (scheme in lower case) without ``.``/``//`` segments; ``None`` for a path
    that climbs out or carries ``%`` (storage would decode ``%2e%2e`` into ``..`` after this check)."""
    scheme, sep, rest = uri.strip().partition("://")
    if not sep:
        scheme, rest = "file", uri.strip()
    if "%" in rest or any(part == ".." for part in rest.split("/")):
        return None
    path = posixpath.normpath(rest) if rest else ""
    path = "" if path == "." else path.rstrip("/")
    return f"{scheme.lower()}://{path}"


def _under(uri: str, root: str) -> bool:
    target, base = _normalized(uri), _normalized(root)
    if target is None or base is None:
        return False
    return target == base or target.startswith(base.rstrip("/") + "/")


def _endpoint(url: str) -> str:
    """An endpoint URL as compared with the chart's list: scheme and host in lower case, no
    trailing slash."""
    parts = urlsplit(url.strip())
    return f"{parts.scheme.lower()}://{parts.netloc.lower()}{parts.path.rstrip('/')}"


def endpoint_listed(url: str | None, listed: tuple[str, ...] | None) -> bool:
    """Whether requests may go to storage endpoint ``url`` signed with the chart's identity: the
    chart's own store (``None``), one the chart lists, or any when there is no list (``None``: a
    local operator without the chart)."""
    if url is None or listed is None:
        return True
    parts = urlsplit(url.strip())
    if parts.query or parts.fragment or "?" in url or "#" in url:
        return False  # nothing after the path: what is listed is the whole address
    return _endpoint(url) in {_endpoint(e) for e in listed}


def _image_allowed(image: str, allowed: tuple[str, ...]) -> bool:
    return any(image == a or (a.endswith("*") and image.startswith(a[:-1])) for a in allowed)


def canonical_flag(arg: str) -> str:
    """The flag a model server reads from ``arg``: the name before ``=``, surrounding whitespace
    gone, ``_`` read as ``-`` (vLLM's parser maps one to the other)."""
    name = arg.strip().split("=", 1)[0]
    return name.replace("_", "-") if name.startswith("--") else name


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
    chart); the chart always sets every one, so in a cluster only what it lists is allowed.
    Server flags are the exception: the built-in :data:`SERVER_FLAGS` always apply, and
    ``server_flags`` adds to them."""

    storage_roots: tuple[str, ...] | None = None  # URIs; "{namespace}" is the run's namespace
    job_images: tuple[str, ...] | None = None  # exact references, or prefixes ending in "*"
    claims: tuple[str, ...] | None = None  # PersistentVolumeClaim names
    server_flags: tuple[str, ...] = ()  # flags the chart allows beyond SERVER_FLAGS
    storage_endpoints: tuple[str, ...] | None = None  # S3 endpoint URLs a spec may name
    node_selector_keys: tuple[str, ...] | None = None  # node labels a spec may select on

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TenantPolicy:
        return cls(
            storage_roots=_list_env(env, "KUBEJURY_ALLOWED_STORAGE_ROOTS"),
            job_images=_list_env(env, "KUBEJURY_ALLOWED_JOB_IMAGES"),
            claims=_list_env(env, "KUBEJURY_ALLOWED_CLAIMS"),
            server_flags=_list_env(env, "KUBEJURY_ALLOWED_SERVER_FLAGS") or (),
            storage_endpoints=_list_env(env, "KUBEJURY_ALLOWED_STORAGE_ENDPOINTS"),
            node_selector_keys=_list_env(env, "KUBEJURY_ALLOWED_NODE_SELECTOR_KEYS"),
        )

    def roots_for(self, namespace: str) -> tuple[str, ...] | None:
        if self.storage_roots is None:
            return None
        return tuple(r.replace("{namespace}", namespace) for r in self.storage_roots)

    def endpoint_allowed(self, url: str | None) -> bool:
        """Whether the operator and the Jobs may send requests to storage endpoint ``url`` (``None``
        is the chart's own store)."""
        return endpoint_listed(url, self.storage_endpoints)


def _flag_refusal(flag: str, runtime: str) -> str:
    return (
        f"server flag {flag} is not allowed for runtime {runtime} by the chart; add it to the chart value "
        "security.allowedServerFlags"
    )


def _is_flag(arg: str) -> bool:
    return arg.startswith("-") and not _NEGATIVE_NUMBER.match(arg)


def server_arg_problems(runtime: str, args: Sequence[str], extra: Sequence[str]) -> list[tuple[int, str]]:
    """``(index, message)`` for each argument of ``args`` the ``runtime``'s server would read as
    something the chart does not allow: a flag outside :data:`SERVER_FLAGS` and ``extra`` (in its
    canonical spelling), a value no allowed flag takes, a flag missing its value, whitespace
    inside a flag (argparse reads ``"--a b"`` as a positional). A flag the chart adds may take a
    value or not: the argument after it is its value unless it is a flag."""
    allowed: dict[str, bool | None] = {canonical_flag(f): None for f in extra}
    allowed.update(SERVER_FLAGS.get(runtime, {}))
    problems: list[tuple[int, str]] = []
    waiting: tuple[int, bool] | None = None  # (index of a flag whose value may follow, required)
    for i, raw in enumerate(args):
        arg = raw.strip()
        if "$(" in arg:
            problems.append(
                (
                    i,
                    f"{arg!r} holds a $(…) reference, which the kubelet replaces with a variable "
                    "of the server's environment (its tokens and keys included)",
                )
            )
            waiting = None
            continue
        if waiting is not None and not _is_flag(arg):
            waiting = None  # this argument is that flag's value
            continue
        if waiting is not None and waiting[1]:
            problems.append((waiting[0], f"server flag {canonical_flag(args[waiting[0]])} needs a value"))
        waiting = None
        if not _is_flag(arg):
            problems.append(
                (
                    i,
                    f"{arg!r} is not the value of a server flag the chart allows for runtime {runtime}: the "
                    "server would read it as an argument of its own; see the chart value security.allowedServerFlags",
                )
            )
            continue
        flag = canonical_flag(arg)
        if _WHITESPACE.search(arg) or flag not in allowed:
            problems.append((i, _flag_refusal(flag, runtime)))
            waiting = None if "=" in arg else (i, False)  # its value, if any, is refused with it
        elif "=" in arg:
            if allowed[flag] is False:
                problems.append((i, f"server flag {flag} takes no value"))
        elif allowed[flag] is not False:
            waiting = (i, allowed[flag] is True)
    if waiting is not None and waiting[1]:
        problems.append((waiting[0], f"server flag {canonical_flag(args[waiting[0]])} needs a value"))
    return problems


def _entries(spec: EvalRunSpec) -> Iterator[tuple[str, ModelSpec]]:
    yield from ((f"spec.models[{i}]", m) for i, m in enumerate(spec.models))
    yield from ((f"spec.judges[{i}]", j) for i, j in enumerate(spec.judges))


def _claims(spec: EvalRunSpec) -> Iterator[tuple[str, str]]:
    """(field, claim name) for every PersistentVolumeClaim the spec would mount."""
    if spec.storage.persistent_volume_claim:
        yield "spec.storage.persistentVolumeClaim", spec.storage.persistent_volume_claim
    if spec.model_cache is not None:
        yield "spec.modelCache.claimName", spec.model_cache.claim_name
    for path, entry in _entries(spec):
        if entry.source and entry.source.startswith("pvc://"):
            yield f"{path}.source", entry.source.removeprefix("pvc://").split("/", 1)[0]


def _reads(spec: EvalRunSpec) -> Iterator[tuple[str, str]]:
    """(field, URI) for everything the Jobs or servers read with a storage identity or from their
    own volumes: an ``s3://`` or ``file://`` benchmark (or a plain path) and ``s3://`` weights."""
    uri = spec.benchmark.uri
    if not uri.lower().startswith(("http://", "https://")):
        yield "spec.benchmark.uri", uri
    for path, entry in _entries(spec):
        if entry.source and entry.source.startswith("s3://"):
            yield f"{path}.source", entry.source


def _storage_problems(spec: EvalRunSpec, namespace: str, policy: TenantPolicy) -> Iterator[FieldProblem]:
    roots = policy.roots_for(namespace)
    if roots is None:
        return
    allowed = ", ".join(roots) if roots else "none"
    if not any(_under(spec.storage.uri, r) for r in roots):
        yield FieldProblem(
            "spec.storage.uri",
            f"{spec.storage.uri} is not under a storage root the chart allows for namespace {namespace} "
            f"(allowed: {allowed}); add it to the chart value security.storageRoots",
        )
    # A credentialsSecretRef does not lift this: the run may name the chart's own storage Secret, one
    # without AWS keys (the pod's ambient identity then signs), or store on file:// (its Jobs then
    # get no keys and read s3:// with the ambient identity).
    for path, uri in _reads(spec):
        if not any(_under(uri, r) for r in roots):
            yield FieldProblem(
                path,
                f"{uri} is read by the run's Jobs or servers but is not under a storage root the chart allows "
                f"for namespace {namespace} (allowed: {allowed}); add it to the chart value security.storageRoots",
            )


def _endpoint_problems(spec: EvalRunSpec, policy: TenantPolicy) -> Iterator[FieldProblem]:
    url = spec.storage.endpoint_url
    if url is not None and not policy.endpoint_allowed(url):
        listed = ", ".join(policy.storage_endpoints or ()) or "none"
        yield FieldProblem(
            "spec.storage.endpointUrl",
            f"storage endpoint {url} is not one the chart lists (allowed: {listed}); the operator and the "
            "Jobs would send it signed requests; add it to the chart value security.storageEndpoints",
        )


def _image_problems(spec: EvalRunSpec, policy: TenantPolicy) -> Iterator[FieldProblem]:
    image = spec.jobs.image
    if policy.job_images is not None and image is not None and not _image_allowed(image, policy.job_images):
        yield FieldProblem(
            "spec.jobs.image",
            f"image {image} is not allowed by the chart; add it to the chart value security.allowedJobImages",
        )


def _claim_problems(spec: EvalRunSpec, policy: TenantPolicy) -> Iterator[FieldProblem]:
    if policy.claims is None:
        return
    for path, claim in _claims(spec):
        if claim not in policy.claims:
            yield FieldProblem(
                path,
                f"PersistentVolumeClaim {claim} is not allowed by the chart; add it to the chart value "
                "security.allowedClaims",
            )


def _entry_problems(spec: EvalRunSpec, policy: TenantPolicy) -> Iterator[FieldProblem]:
    keys = DEFAULT_NODE_SELECTOR_KEYS if policy.node_selector_keys is None else policy.node_selector_keys
    for path, entry in _entries(spec):
        if entry.runtime in SERVER_FLAGS:
            for index, message in server_arg_problems(entry.runtime, entry.extra_args, policy.server_flags):
                yield FieldProblem(f"{path}.extraArgs[{index}]", message)
        elif entry.extra_args:
            yield FieldProblem(
                f"{path}.extraArgs",
                f"runtime {entry.runtime} takes no server arguments: nothing would check or pass them",
            )
        for key in entry.node_selector:
            if key not in keys:
                yield FieldProblem(
                    f"{path}.nodeSelector.{key}",
                    f"node label {key} may not be selected by a run (allowed: {', '.join(keys) or 'none'}); "
                    "add it to the chart value security.allowedNodeSelectorKeys",
                )


def run_policy_problems(run: EvalRun, namespace: str, policy: TenantPolicy) -> list[FieldProblem]:
    """Everything in a parsed EvalRun that reaches beyond what the chart allows, each naming its
    field and the chart value that would allow it. It reads the canonical spec, the one rendered
    into the cluster's objects: stripped, schemes in lower case, camelCase and snake_case alike."""
    spec = run.spec
    return [
        *_storage_problems(spec, namespace, policy),
        *_endpoint_problems(spec, policy),
        *_image_problems(spec, policy),
        *_claim_problems(spec, policy),
        *_entry_problems(spec, policy),
    ]


def policy_problems(body: Mapping[str, Any], policy: TenantPolicy) -> list[FieldProblem]:
    """:func:`run_policy_problems` of an EvalRun object (as the API server sends it). A body that
    does not parse has no policy problems: its spec problems already refuse it, and what the
    operator would render from it cannot be known."""
    run, _problems = evalrun_problems({k: v for k, v in body.items() if k != "status"})
    return [] if run is None else run_policy_problems(run, namespace_of(body), policy)
