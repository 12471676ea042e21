"""A Job's storage follows no symbolic link below the results mount (issue 29, finding 8).

The Job's storage URI is the run's own folder, ``<mount>/<namespace>/<name>-<uid>``. A link planted
at that folder (or at the namespace's) would otherwise send its writes, reads and deletes into
another run; the operator names the mount in ``KUBEJURY_STORAGE_MOUNT`` so the check starts there.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kubejury.config.spec import StorageSpec
from kubejury.files.storage import STORAGE_MOUNT_ENV, StorageError
from kubejury.pipeline import open_run_storage
from kubejury_operator import settings as opsettings
from kubejury_operator import vocabulary as vocab


def planted(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(mount, the run's folder, a victim folder): the run's folder is a link to the victim."""
    mount, victim = tmp_path / "results", tmp_path / "victim"
    (mount / "team-a").mkdir(parents=True)
    victim.mkdir()
    (victim / "answer.jsonl").write_text("{}\n")
    run = mount / "team-a" / "r-0123abcd"
    run.symlink_to(victim, target_is_directory=True)
    return mount, run, victim


def test_a_link_at_the_runs_own_folder_is_refused_when_the_operator_names_the_mount(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mount, run, victim = planted(tmp_path)
    monkeypatch.setenv(STORAGE_MOUNT_ENV, str(mount))
    with pytest.raises(StorageError):
        store = open_run_storage(StorageSpec(uri=run.as_uri()))
        store.delete_prefix("")
    assert (victim / "answer.jsonl").exists()


def test_a_mount_that_does_not_hold_the_uri_changes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "own"
    elsewhere.mkdir()
    monkeypatch.setenv(STORAGE_MOUNT_ENV, str(tmp_path / "results"))
    store = open_run_storage(StorageSpec(uri=elsewhere.as_uri()))
    store.write_bytes("a/b.txt", b"x")
    assert (elsewhere / "a" / "b.txt").read_text() == "x"


def test_the_operator_names_the_mount_in_every_file_jobs_environment() -> None:
    from kubejury_operator import manifests as mf

    run = vocab.RunRef(name="r", namespace="team-a", uid="0123abcd-1")
    storage = vocab.JobStorage(uri="file:///results/team-a/r-0123abcd", root="file:///results")
    manifest = mf.aggregation_job(run, opsettings.WorkloadSettings(results_pvc="results"), storage)
    (container,) = manifest["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env[STORAGE_MOUNT_ENV] == "/results"
