"""When the dev cluster cannot start, the error names the component and quotes its log, and nothing
that was started is left running; a bad nodes file is refused before anything starts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from devcluster import ClusterError, NodesFileError, build_bins, start_cluster
from devcluster.kwok_config import stages_dir

pytestmark = [pytest.mark.integration, pytest.mark.cluster]


def processes_mentioning(text: Path) -> list[int]:
    """Live processes whose command line mentions ``text`` (zombies have an empty one)."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if str(text).encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


@pytest.fixture
def broken_apiserver_bins(tmp_path: Path) -> Path:
    """The real binaries, except a kube-apiserver that fails the way a bad flag does."""
    real = build_bins()
    bins = tmp_path / "kube" / "bin"
    bins.mkdir(parents=True)
    for name in ("etcd", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok"):
        (bins / name).symlink_to(real / name)
    stages_dir(bins).symlink_to(stages_dir(real))
    fake = bins / "kube-apiserver"
    fake.write_text('#!/bin/sh\necho "Error: unknown flag: --made-up-for-this-test" >&2\nexit 1\n')
    fake.chmod(0o755)
    return bins


def test_a_failing_component_is_named_with_its_log_and_what_started_is_stopped(
    broken_apiserver_bins: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    with pytest.raises(ClusterError) as error:
        start_cluster(state_dir=state, bin_dir=broken_apiserver_bins)
    message = str(error.value)
    assert "kube-apiserver exited" in message
    assert "unknown flag: --made-up-for-this-test" in message
    assert (state / "logs" / "etcd.log").exists()  # etcd was started before the API server...
    assert not processes_mentioning(state)  # ...and stopped again
    assert not list((state / "pids").iterdir())
    assert not (state / "cluster.json").exists()


def test_a_bad_nodes_file_is_refused_before_anything_starts(tmp_path: Path) -> None:
    nodes = tmp_path / "nodes.yaml"
    nodes.write_text("kind: NodeList\nitems:\n- metadata: {name: a}\n- metadata: {name: a}\n")
    with pytest.raises(NodesFileError, match=r"items\[1\]: duplicate node name 'a'"):
        start_cluster(nodes, tmp_path / "state", bin_dir=Path(os.devnull))
    assert not (tmp_path / "state").exists()
