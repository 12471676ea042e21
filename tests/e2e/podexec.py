"""What a kubelet would run for one container, as a local process: pure translation, no I/O.

Why this module exists: the e2e harness's simulated kubelet (``kubelet_runner``) and
``make operator-up`` both turn a Pod (or a Deployment's pod template) into a local process, and
that translation is where the fidelity of the simulation lives. Keeping it pure lets unit tests
(``test_podexec.py``) pin each rule down.

Rules, as the kubelet applies them:

* **argv**: ``command`` (else the image's entrypoint, which the caller supplies) followed by
  ``args``, each with ``$(VAR)`` references expanded from the container's environment
  (``$$`` is a literal ``$``; an undefined ``$(VAR)`` stays as written).
* **env**: ``envFrom`` first (ConfigMaps and Secrets, with ``prefix``; entries that are not valid
  variable names are skipped), then ``env`` in order: ``value`` (with ``$(VAR)`` expansion
  against the variables defined before it), ``valueFrom.secretKeyRef`` /
  ``configMapKeyRef`` (read from the API by the caller's lookup), ``fieldRef`` (metadata.name,
  namespace, uid, labels['k'], annotations['k'], spec.nodeName, spec.serviceAccountName,
  status.podIP, status.hostIP). A missing non-optional Secret, ConfigMap or key is
  :class:`ContainerConfigError` — the kubelet's ``CreateContainerConfigError``.
* **volumes** become bind mounts: ``configMap`` / ``secret`` (all keys or ``items``, optional)
  are written as files into a per-pod directory; ``emptyDir`` is an empty per-pod directory;
  ``persistentVolumeClaim`` is the host directory of the bound PersistentVolume (the caller
  resolves claim → PV ``hostPath``); ``projected`` with configMap/secret sources likewise.
  ``subPath`` mounts one entry of the volume. Any other volume type is a ContainerConfigError.
* **mount namespace**: :func:`wrapped_argv` runs the process under ``unshare -m`` with every
  volume bind-mounted at its ``mountPath`` (parents before children, ``readOnly`` remounted
  read-only), so the process sees exactly the paths its pod spec names — no path rewriting of
  args, env or mounted files. Mount points that do not exist on the host are created there as
  empty directories (the one trace on the host file system).
"""

from __future__ import annotations

import base64
import re
import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePosixPath
from typing import Any

_VAR = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")

Lookup = Callable[[str, str, str], Mapping[str, str] | None]
"""(kind "Secret"|"ConfigMap", namespace, name) → decoded data, or None when it does not exist."""


class ContainerConfigError(Exception):
    """The kubelet could not build the container's config (CreateContainerConfigError)."""


@dataclass(frozen=True)
class Mount:
    """One bind mount: host ``source`` appears at ``target`` inside the process's namespace."""

    source: str
    target: str
    read_only: bool = False


@dataclass(frozen=True)
class ProcessSpec:
    """A container as a local process: argv, environment, files to write first, bind mounts."""

    argv: list[str]
    env: dict[str, str]
    files: dict[str, str] = field(default_factory=dict)  # host path → content (volume files)
    directories: list[str] = field(default_factory=list)  # host dirs to create (emptyDir, volumes)
    mounts: list[Mount] = field(default_factory=list)
    working_dir: str | None = None


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion (``$$`` escapes; unknown references stay verbatim)."""

    def replace(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env[name] if name in env else match.group(0)

    return _VAR.sub(replace, text)


def decoded_secret(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret object's data (base64) and stringData as text."""
    data = {k: base64.b64decode(v).decode() for k, v in (secret.get("data") or {}).items()}
    data.update({k: str(v) for k, v in (secret.get("stringData") or {}).items()})
    return data


def _field_value(pod: Mapping[str, Any], path: str) -> str:
    meta = pod.get("metadata") or {}
    simple = {
        "metadata.name": meta.get("name"),
        "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
        "status.podIP": (pod.get("status") or {}).get("podIP"),
        "status.hostIP": (pod.get("status") or {}).get("hostIP"),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _FIELD.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise ContainerConfigError(f"fieldRef {path!r} is not supported by the simulated kubelet")


def _ref_data(lookup: Lookup, kind: str, namespace: str, ref: Mapping[str, Any]) -> Mapping[str, str] | None:
    data = lookup(kind, namespace, str(ref.get("name")))
    if data is None and not ref.get("optional"):
        raise ContainerConfigError(f'{kind.lower()} "{ref.get("name")}" not found')
    return data


def container_env(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    lookup: Lookup,
    base: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The container's environment as the kubelet computes it (see the module docstring)."""
    namespace = str((pod.get("metadata") or {}).get("namespace") or "default")
    env: dict[str, str] = dict(base or {})
    for source in container.get("envFrom") or []:
        prefix = str(source.get("prefix") or "")
        for kind, key in (("ConfigMap", "configMapRef"), ("Secret", "secretRef")):
            if key in source:
                data = _ref_data(lookup, kind, namespace, source[key]) or {}
                for name, value in data.items():
                    if _ENV_NAME.match(prefix + name):
                        env[prefix + name] = value
    for item in container.get("env") or []:
        name = str(item["name"])
        if "valueFrom" not in item:
            env[name] = expand(str(item.get("value") or ""), env)
            continue
        source = item["valueFrom"]
        for kind, key in (("Secret", "secretKeyRef"), ("ConfigMap", "configMapKeyRef")):
            if key in source:
                ref = source[key]
                found = _ref_data(lookup, kind, namespace, ref)
                if found is None:
                    break
                if ref["key"] not in found:
                    if ref.get("optional"):
                        break
                    raise ContainerConfigError(
                        f"couldn't find key {ref['key']} in {kind} {namespace}/{ref['name']}"
                    )
                env[name] = found[ref["key"]]
                break
        else:
            if "fieldRef" in source:
                env[name] = _field_value(pod, str(source["fieldRef"]["fieldPath"]))
            else:
                raise ContainerConfigError(f"env {name}: valueFrom {sorted(source)} is not supported")
    return env


def _volume_files(volume: Mapping[str, Any], namespace: str, lookup: Lookup) -> dict[str, str] | None:
    """Relative path → content for configMap/secret/projected volumes; None for other kinds."""
    sources: list[tuple[str, Mapping[str, Any]]] = []
    if "configMap" in volume:
        sources.append(("ConfigMap", volume["configMap"]))
    elif "secret" in volume:
        secret_ref = dict(volume["secret"])
        secret_ref["name"] = secret_ref.get("secretName")
        sources.append(("Secret", secret_ref))
    elif "projected" in volume:
        for projection in volume["projected"].get("sources") or []:
            if "configMap" in projection:
                sources.append(("ConfigMap", projection["configMap"]))
            elif "secret" in projection:
                sources.append(("Secret", projection["secret"]))
            else:
                raise ContainerConfigError(
                    f"volume {volume['name']}: projected source {sorted(projection)} is not supported"
                )
    else:
        return None
    files: dict[str, str] = {}
    for kind, ref in sources:
        content = _ref_data(lookup, kind, namespace, ref) or {}
        items = ref.get("items")
        if items:
            for item in items:
                if item["key"] not in content:
                    if ref.get("optional"):
                        continue
                    raise ContainerConfigError(
                        f"volume {volume['name']}: key {item['key']} not in {kind} {ref.get('name')}"
                    )
                files[str(item["path"])] = content[item["key"]]
        else:
            files.update(content)
    return files


def process_spec(
    pod: Mapping[str, Any],
    container: Mapping[str, Any],
    *,
    lookup: Lookup,
    pod_dir: str,
    claim_path: Callable[[str, str], str],
    entrypoint: Sequence[str] = (),
    base_env: Mapping[str, str] | None = None,
    keep_visible: Sequence[str] = (),
) -> ProcessSpec:
    """Translate one container of ``pod`` into a :class:`ProcessSpec`.

    ``pod_dir`` is a host directory owned by this pod (volume contents go under it);
    ``claim_path(namespace, claim)`` is the host directory of a bound PersistentVolumeClaim;
    ``entrypoint`` stands in for the image's ENTRYPOINT when ``command`` is absent;
    ``keep_visible`` are host paths the process itself runs from (this checkout, its virtualenv):
    an ``emptyDir`` mounted over one of them (a checkout under ``/tmp``, as CI clones may be, and
    the pods' scratch ``/tmp``) is not bind-mounted — the process gets the directory as ``TMPDIR``
    when the mount is ``/tmp``, and the scratch space is otherwise the host's.
    """
    meta = pod.get("metadata") or {}
    namespace = str(meta.get("namespace") or "default")
    env = container_env(pod, container, lookup, base_env)
    command = [str(c) for c in container.get("command") or entrypoint]
    if not command:
        raise ContainerConfigError(f"container {container.get('name')}: no command and no entrypoint")
    argv = [expand(c, env) for c in command] + [expand(str(a), env) for a in container.get("args") or []]

    volumes = {str(v["name"]): v for v in (pod.get("spec") or {}).get("volumes") or []}
    files: dict[str, str] = {}
    directories: list[str] = []
    sources: dict[str, str] = {}
    for name, volume in volumes.items():
        root = str(PurePosixPath(pod_dir) / "volumes" / name)
        if "persistentVolumeClaim" in volume:
            sources[name] = claim_path(namespace, str(volume["persistentVolumeClaim"]["claimName"]))
            continue
        if "emptyDir" in volume:
            directories.append(root)
            sources[name] = root
            continue
        content = _volume_files(volume, namespace, lookup)
        if content is None:
            kinds = sorted(k for k in volume if k != "name")
            raise ContainerConfigError(
                f"volume {name}: type {kinds} is not supported by the simulated kubelet"
            )
        directories.append(root)
        for rel, text in content.items():
            files[str(PurePosixPath(root) / rel)] = text
        sources[name] = root

    mounts: list[Mount] = []
    for mount in container.get("volumeMounts") or []:
        name = str(mount["name"])
        if name not in volumes:
            raise ContainerConfigError(f"volumeMount {name}: no such volume in the pod")
        source = sources[name]
        if mount.get("subPath"):
            source = str(PurePosixPath(source) / str(mount["subPath"]))
        target = str(mount["mountPath"])
        if "emptyDir" in volumes[name] and _hides_any(target, keep_visible):
            if PurePosixPath(target) == PurePosixPath("/tmp"):
                env["TMPDIR"] = source
            continue
        mounts.append(Mount(source, target, bool(mount.get("readOnly"))))
    mounts.sort(key=lambda m: len(PurePosixPath(m.target).parts))
    return ProcessSpec(
        argv=argv,
        env=env,
        files=files,
        directories=directories,
        mounts=mounts,
        working_dir=container.get("workingDir"),
    )


def _hides_any(target: str, paths: Sequence[str]) -> bool:
    """Whether a mount at ``target`` would hide any of ``paths`` (equal to it or under it)."""
    mount_point = PurePosixPath(target)
    return any(PurePosixPath(p) == mount_point or PurePosixPath(p).is_relative_to(mount_point) for p in paths)


def mount_script(mounts: Sequence[Mount], working_dir: str | None = None) -> str:
    """The ``sh`` script run inside the new mount namespace before ``exec "$@"``."""
    lines = ["set -e"]
    for mount in mounts:
        source, target = shlex.quote(mount.source), shlex.quote(mount.target)
        parent = shlex.quote(str(PurePosixPath(mount.target).parent))
        lines.append(
            f"if [ -d {source} ]; then mkdir -p {target}; "
            f"else mkdir -p {parent}; [ -e {target} ] || : > {target}; fi"
        )
        lines.append(f"mount --bind {source} {target}")
        if mount.read_only:
            lines.append(f"mount -o remount,bind,ro {target}")
    if working_dir:
        lines.append(f"cd {shlex.quote(working_dir)}")
    lines.append('exec "$@"')
    return "\n".join(lines)


def wrapped_argv(spec: ProcessSpec) -> list[str]:
    """argv that runs ``spec.argv`` in a private mount namespace with the pod's volumes mounted.

    ``unshare`` and ``sh`` both ``exec``, so the returned process's pid is the container process's.
    """
    if not spec.mounts and not spec.working_dir:
        return list(spec.argv)
    script = mount_script(spec.mounts, spec.working_dir)
    return ["unshare", "--mount", "--propagation", "private", "--", "sh", "-c", script, "sh", *spec.argv]


def references(pod: Mapping[str, Any]) -> tuple[set[tuple[str, str]], set[str]]:
    """What the kubelet must read from the API first: ({(kind, name)} of Secrets/ConfigMaps, {claims})."""
    refs: set[tuple[str, str]] = set()
    claims: set[str] = set()
    spec = pod.get("spec") or {}
    for container in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        for source in container.get("envFrom") or []:
            if "configMapRef" in source:
                refs.add(("ConfigMap", str(source["configMapRef"]["name"])))
            if "secretRef" in source:
                refs.add(("Secret", str(source["secretRef"]["name"])))
        for item in container.get("env") or []:
            value_from = item.get("valueFrom") or {}
            if "secretKeyRef" in value_from:
                refs.add(("Secret", str(value_from["secretKeyRef"]["name"])))
            if "configMapKeyRef" in value_from:
                refs.add(("ConfigMap", str(value_from["configMapKeyRef"]["name"])))
    for volume in spec.get("volumes") or []:
        if "configMap" in volume:
            refs.add(("ConfigMap", str(volume["configMap"]["name"])))
        if "secret" in volume:
            refs.add(("Secret", str(volume["secret"]["secretName"])))
        if "persistentVolumeClaim" in volume:
            claims.add(str(volume["persistentVolumeClaim"]["claimName"]))
        for projection in (volume.get("projected") or {}).get("sources") or []:
            if "configMap" in projection:
                refs.add(("ConfigMap", str(projection["configMap"]["name"])))
            if "secret" in projection:
                refs.add(("Secret", str(projection["secret"]["name"])))
    return refs, claims
