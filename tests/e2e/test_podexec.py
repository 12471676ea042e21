"""The simulated kubelet's pod → process translation (pure; no cluster needed, not marked e2e)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from podexec import (
    ContainerConfigError,
    Mount,
    ProcessSpec,
    container_env,
    expand,
    process_spec,
    references,
    wrapped_argv,
)

SECRETS = {
    ("Secret", "hosted-key"): {"token": "sk-test"},
    ("ConfigMap", "settings"): {"A": "1", "bad key": "x"},
}


def lookup(kind: str, namespace: str, name: str) -> dict[str, str] | None:
    assert namespace == "evals"
    return SECRETS.get((kind, name))


def job_pod(**container_overrides: Any) -> dict[str, Any]:
    container: dict[str, Any] = {
        "name": "stage",
        "command": ["kubejury"],
        "args": ["generate", "--shard-index", "$(JOB_COMPLETION_INDEX)", "--literal", "$$(HOME)"],
        "env": [
            {"name": "HOME", "value": "/tmp"},
            {"name": "CACHE", "value": "$(HOME)/cache"},
            {"name": "KEY", "valueFrom": {"secretKeyRef": {"name": "hosted-key", "key": "token"}}},
            {
                "name": "JOB_COMPLETION_INDEX",
                "valueFrom": {
                    "fieldRef": {
                        "fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"
                    }
                },
            },
            {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
        ],
        "envFrom": [{"configMapRef": {"name": "settings"}, "prefix": "S_"}],
        "volumeMounts": [
            {"name": "spec", "mountPath": "/etc/kubejury", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "results", "mountPath": "/var/lib/kubejury/results"},
        ],
    }
    container.update(container_overrides)
    return {
        "metadata": {
            "name": "kj-run-gen-0-abc",
            "namespace": "evals",
            "annotations": {"batch.kubernetes.io/job-completion-index": "3"},
        },
        "spec": {
            "nodeName": "cpu-1",
            "containers": [container],
            "volumes": [
                {
                    "name": "spec",
                    "configMap": {"name": "settings", "items": [{"key": "A", "path": "a.yaml"}]},
                },
                {"name": "tmp", "emptyDir": {}},
                {"name": "results", "persistentVolumeClaim": {"claimName": "results"}},
            ],
        },
    }


def test_expansion_follows_kubernetes_rules() -> None:
    env = {"A": "x"}
    assert expand("$(A)/$(B)/$$(A)/$$", env) == "x/$(B)/$(A)/$"


def test_env_resolves_values_secrets_config_maps_and_fields_in_order() -> None:
    pod = job_pod()
    env = container_env(pod, pod["spec"]["containers"][0], lookup, {"PATH": "/bin"})
    assert env["CACHE"] == "/tmp/cache"  # expanded against HOME defined before it
    assert env["KEY"] == "sk-test"
    assert env["JOB_COMPLETION_INDEX"] == "3"
    assert env["POD"] == "kj-run-gen-0-abc"
    assert env["S_A"] == "1" and "S_bad key" not in env  # invalid names from envFrom are skipped
    assert env["PATH"] == "/bin"


def test_missing_secret_is_a_container_config_error_naming_it() -> None:
    pod = job_pod(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k"}}}])
    with pytest.raises(ContainerConfigError, match='secret "nope" not found'):
        container_env(pod, pod["spec"]["containers"][0], lookup)
    pod = job_pod(env=[{"name": "K", "valueFrom": {"secretKeyRef": {"name": "hosted-key", "key": "x"}}}])
    with pytest.raises(ContainerConfigError, match="couldn't find key x"):
        container_env(pod, pod["spec"]["containers"][0], lookup)
    optional = {"name": "K", "valueFrom": {"secretKeyRef": {"name": "nope", "key": "k", "optional": True}}}
    pod = job_pod(env=[optional])
    assert "K" not in container_env(pod, pod["spec"]["containers"][0], lookup)


def test_process_spec_expands_args_and_maps_every_volume_to_a_bind_mount() -> None:
    pod = job_pod()
    spec = process_spec(
        pod,
        pod["spec"]["containers"][0],
        lookup=lookup,
        pod_dir="/w/pods/u1",
        claim_path=lambda ns, claim: f"/pv/{ns}/{claim}",
    )
    assert spec.argv == ["kubejury", "generate", "--shard-index", "3", "--literal", "$(HOME)"]
    assert spec.files == {"/w/pods/u1/volumes/spec/a.yaml": "1"}
    assert "/w/pods/u1/volumes/tmp" in spec.directories
    assert spec.mounts == [
        Mount("/w/pods/u1/volumes/tmp", "/tmp"),
        Mount("/w/pods/u1/volumes/spec", "/etc/kubejury", read_only=True),
        Mount("/pv/evals/results", "/var/lib/kubejury/results"),
    ]


def test_references_lists_what_the_kubelet_reads_first() -> None:
    refs, claims = references(job_pod())
    assert refs == {("Secret", "hosted-key"), ("ConfigMap", "settings")}
    assert claims == {"results"}


def test_unsupported_volume_types_are_refused_not_ignored() -> None:
    pod = job_pod()
    pod["spec"]["volumes"].append({"name": "host", "hostPath": {"path": "/"}})
    with pytest.raises(ContainerConfigError, match="hostPath"):
        process_spec(
            pod, pod["spec"]["containers"][0], lookup=lookup, pod_dir="/w", claim_path=lambda n, c: c
        )


def _can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "--mount", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@pytest.mark.skipif(not _can_unshare(), reason="needs permission to create a mount namespace (root)")
def test_the_process_sees_its_volumes_at_the_mount_paths_and_the_host_does_not(tmp_path: Path) -> None:
    volume = tmp_path / "vol"
    volume.mkdir()
    (volume / "evalrun.yaml").write_text("kind: EvalRun\n")
    target = tmp_path / "mnt" / "etc-kubejury"
    spec = process_spec(
        {
            "metadata": {"name": "p", "namespace": "evals"},
            "spec": {"volumes": [{"name": "v", "emptyDir": {}}]},
        },
        {
            "name": "c",
            "command": ["cat", str(target / "evalrun.yaml")],
            "volumeMounts": [{"name": "v", "mountPath": str(target), "readOnly": True}],
        },
        lookup=lookup,
        pod_dir=str(tmp_path / "pod"),
        claim_path=lambda n, c: c,
    )
    # emptyDir → point its source at the prepared directory to check the mount itself.
    spec.mounts[0] = Mount(str(volume), str(target), read_only=True)
    done = subprocess.run(wrapped_argv(spec), capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "kind: EvalRun\n"
    assert not (target / "evalrun.yaml").exists()  # the mount lived only in the process's namespace


def test_an_empty_dir_over_the_checkout_becomes_tmpdir_instead_of_hiding_it() -> None:
    """CI may clone under /tmp, and every pod mounts an emptyDir at /tmp: that mount must not hide
    the interpreter and checkout the process runs from; the pod's scratch space becomes TMPDIR."""
    pod = {
        "metadata": {"name": "p", "namespace": "evals"},
        "spec": {"volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "cfg", "emptyDir": {}}]},
    }
    container = {
        "name": "c",
        "command": ["kubejury", "generate"],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}, {"name": "cfg", "mountPath": "/etc/kubejury"}],
    }

    def spec_for(keep: tuple[str, ...]) -> ProcessSpec:
        return process_spec(
            pod,
            container,
            lookup=lambda *_: None,
            pod_dir="/pods/p",
            claim_path=lambda n, c: c,
            keep_visible=keep,
        )

    hidden = spec_for(("/tmp/ci-clone/.venv", "/tmp/ci-clone"))
    assert [m.target for m in hidden.mounts] == ["/etc/kubejury"]
    assert hidden.env["TMPDIR"] == "/pods/p/volumes/tmp"
    unaffected = spec_for(("/work/repo/.venv", "/work/repo"))
    assert sorted(m.target for m in unaffected.mounts) == ["/etc/kubejury", "/tmp"]
    assert "TMPDIR" not in unaffected.env
