"""The watch-fed caches' index entries: a run's children under (namespace, run label), nothing else."""

from __future__ import annotations

from typing import Any

from kubejury_operator import manifests as mf
from kubejury_operator import watched


def test_a_child_is_indexed_under_its_namespace_and_run_label() -> None:
    job = {
        "metadata": {"name": "kj-r-aggregate", "namespace": "evals", "labels": mf.labels("r", "aggregate")}
    }
    assert watched.child_entry(job) == {("evals", "r"): job}


def test_objects_of_other_managers_or_without_a_run_are_not_indexed() -> None:
    foreign = {"metadata": {"name": "x", "namespace": "evals", "labels": {mf.LABEL_RUN: "r"}}}
    runless = {
        "metadata": {"name": "y", "namespace": "evals", "labels": {mf.LABEL_MANAGED_BY: mf.MANAGED_BY}}
    }
    assert watched.child_entry(foreign) is None and watched.child_entry(runless) is None


def test_caches_answer_like_a_list_and_are_absent_without_every_index() -> None:
    pod = {"metadata": {"name": "p", "namespace": "evals", "labels": mf.labels("r", "server")}}
    indexes: dict[str, dict[Any, list[dict[str, Any]]]] = {
        name: {} for name in watched.CHILD_INDEXES.values()
    }
    indexes[watched.CHILD_INDEXES["Pod"]] = {("evals", "r"): [pod]}
    indexes[watched.NODE_INDEX] = {None: [{"metadata": {"name": "n"}}]}
    caches = watched.Caches.from_handler_kwargs(indexes)
    assert caches is not None
    assert caches.children_of("Pod", "evals", "r") == [pod]
    assert caches.children_of("Job", "evals", "r") == []
    assert [n["metadata"]["name"] for n in caches.all_nodes()] == ["n"]
    assert watched.Caches.from_handler_kwargs({}) is None


def test_a_childs_run_is_its_evalrun_owner_and_a_run_being_deleted_is_not_reconciled() -> None:
    owner = {"apiVersion": f"{mf.API_GROUP}/{mf.API_VERSION}", "kind": "EvalRun", "name": "r", "uid": "u"}
    job = {"metadata": {"name": "j", "namespace": "evals", "ownerReferences": [owner]}}
    assert watched.owner_run(job) == ("evals", "r")
    assert watched.owner_run({"metadata": {"name": "j", "namespace": "evals"}}) is None
    run = {"metadata": {"name": "r", "namespace": "evals"}}
    index = watched.evalrun_entry(run)
    assert watched.latest_run({k: [v] for k, v in index.items()}, ("evals", "r")) == run
    deleting = {"metadata": {**run["metadata"], "deletionTimestamp": "2026-11-30T20:00:00Z"}}
    assert watched.latest_run({("evals", "r"): [deleting]}, ("evals", "r")) is None
    assert watched.latest_run({}, ("evals", "r")) is None
