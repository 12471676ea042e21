"""Names and labels of a run's children stay within what the API server accepts (the real API
server's verdict is in tests/integration/devcluster/test_child_names_on_cluster.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from kubejury.config.spec import JobSettings
from kubejury.redact import redact_tree
from kubejury_operator import status as st
from kubejury_operator import vocabulary as vc


def test_the_job_name_budget_leaves_room_for_the_largest_index_the_spec_allows() -> None:
    (bound,) = [m.le for m in JobSettings.model_fields["generation_shards"].metadata if hasattr(m, "le")]
    assert bound - 1 == vc.MAX_JOB_INDEX
    name = "r" * 63
    for job in (
        vc.generation_job_name(name, "m" * 40, "primary"),
        vc.judge_job_name(name, "j" * 40, "primary", 12),
        vc.aggregation_job_name(name),
    ):
        assert len(f"{job}-{vc.MAX_JOB_INDEX}") <= 63, job


# ----------------------------------------------------------- names joined from user-chosen parts

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
DNS_1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def test_two_models_whose_name_and_series_join_alike_get_distinct_generation_jobs() -> None:
    """Models ``m`` / ``m-a`` with series ``a-b`` / ``b`` both joined to ``kj-probe-gen-m-a-b``; the
    second create got a 409 and counted the first model's Job as its own."""
    assert vc.generation_job_name("probe", "m", "a-b") != vc.generation_job_name("probe", "m-a", "b")


def test_two_judges_whose_name_and_series_join_alike_get_distinct_judge_jobs() -> None:
    assert vc.judge_job_name("probe", "j", "a-b", 1) != vc.judge_job_name("probe", "j-a", "b", 1)
    assert vc.judge_job_name("probe", "j", "s-1", 2) != vc.judge_job_name("probe", "j-s", "1", 2)


def test_two_runs_whose_run_and_model_names_join_alike_get_distinct_deployments_and_services() -> None:
    """Run ``foo`` with model ``x-m-y`` and run ``foo-m-x`` with model ``y`` shared a Deployment."""
    foo = vc.workload_name("foo", vc.endpoint_key("model", "x-m-y"))
    foo_m_x = vc.workload_name("foo-m-x", vc.endpoint_key("model", "y"))
    assert foo != foo_m_x


def test_jobs_of_different_stages_and_runs_never_share_a_name() -> None:
    """A judge Job of run ``r`` and a generation Job of run ``r-judge-x`` joined alike, and so did
    the aggregation Job of run ``r-gen-m-s`` and a generation Job of run ``r`` (series ``s-aggregate``)."""
    assert vc.judge_job_name("r", "x-gen-m", "s", 1) != vc.generation_job_name("r-judge-x", "m", "s-1")
    assert vc.aggregation_job_name("r-gen-m-s") != vc.generation_job_name("r", "m", "s-aggregate")


def test_joined_names_stay_readable_and_are_the_same_for_the_same_parts() -> None:
    generation = vc.generation_job_name("study", "qwen", "primary")
    assert generation.startswith("kj-study-gen-qwen-primary-")
    assert generation == vc.generation_job_name("study", "qwen", "primary")
    judge = vc.judge_job_name("study", "gemma", "primary", 3)
    assert judge.startswith("kj-study-judge-gemma-primary-") and judge.endswith("-3")
    assert vc.workload_name("study", "m-qwen").startswith("kj-study-m-qwen-")


def test_joined_names_do_not_depend_on_the_interpreters_hash_seed() -> None:
    """The operator restarts and runs several replicas: a name must not change with the process."""
    script = (
        "from kubejury_operator import vocabulary as vc;"
        "print(vc.generation_job_name('r', 'm', 'a-b'), vc.workload_name('r', 'm-x'))"
    )
    outputs = {
        subprocess.run(
            [sys.executable, "-c", script],
            env={**os.environ, "PYTHONHASHSEED": seed},
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for seed in ("1", "2")
    }
    assert outputs == {f"{vc.generation_job_name('r', 'm', 'a-b')} {vc.workload_name('r', 'm-x')}\n"}


def test_every_child_name_stays_within_its_limit_for_63_character_parts() -> None:
    run, model, series = "r" * 63, "m" * 63, "s" * 63
    jobs = [
        vc.generation_job_name(run, model, series),
        vc.generation_job_name(run, model, series + "x"),
        vc.judge_job_name(run, model, series, 999),
        vc.aggregation_job_name(run),
    ]
    for job in jobs:
        assert DNS_LABEL.match(f"{job}-{vc.MAX_JOB_INDEX}") and len(f"{job}-{vc.MAX_JOB_INDEX}") <= 63, job
    assert vc.judge_job_name(run, model, series, 999).endswith("-999")
    assert jobs[0] != jobs[1]  # cut to the same readable prefix, told apart by the hash
    for key in (vc.endpoint_key("model", model), vc.endpoint_key("judge", model)):
        workload = vc.workload_name(run, key)
        assert DNS_1035_LABEL.match(workload) and len(workload) <= vc.WORKLOAD_NAME_LIMIT, workload
    assert vc.workload_name(run, vc.endpoint_key("model", model)) != vc.workload_name(
        run, vc.endpoint_key("judge", model)
    )
    for single in (vc.spec_configmap_name(run), vc.job_service_account_name(run)):
        assert DNS_LABEL.match(single) and len(single) <= 63, single


def test_a_run_label_is_unchanged_when_valid_and_hashed_when_cut() -> None:
    assert vc.label_value("my-run") == "my-run"
    long = vc.label_value("a" * 70)
    assert len(long) <= 63 and long != vc.label_value("a" * 71)
    assert vc.label_value("a" * 63 + "x") != vc.label_value("a" * 63 + "y")


def test_a_status_differing_only_in_empty_fields_is_unchanged() -> None:
    stored = {"phase": "Pending", "progress": "0/4", "summary": {"w": 1}}
    new = {"phase": "Pending", "progress": "0/4", "startedAt": None, "completedAt": None}
    assert not st.status_changed(stored, new)
    assert st.status_changed(stored, {**new, "progress": "1/4"})
    assert st.status_changed({"phase": "Pending", "startedAt": "t"}, {"phase": "Pending", "startedAt": None})


def test_a_status_patch_carries_only_the_keys_that_change() -> None:
    placement = {"m": {"quantization": "fp8", "reason": "Hopper: online FP8"}}
    stored = {"phase": "Generating", "progress": "1/4", "placement": placement, "startedAt": "t"}
    new = {"phase": "Generating", "progress": "2/4", "placement": placement, "startedAt": "t"}
    assert st.status_patch(stored, new) == {"progress": "2/4"}
    assert st.status_patch(stored, {**new, "startedAt": None}) == {"progress": "2/4", "startedAt": None}
    assert st.status_patch(stored, {**stored, "completedAt": None}) == {}


def test_a_status_stored_redacted_is_unchanged_when_recomputed_with_the_credential() -> None:
    """The gateway redacts status strings before patching; comparing the stored (redacted) status
    with a recomputed unredacted one must not re-patch the run on every tick."""
    message = "endpoint http://user:hunter2secret@llm.example:8000/v1 refused the connection"
    new = {"phase": "Failed", "conditions": [{"type": "Failed", "message": message}]}
    stored = redact_tree(new)
    assert stored != new  # the credential really was masked
    assert not st.status_changed(stored, new)
    assert st.status_changed(stored, {**new, "phase": "Succeeded"})


def test_a_refused_change_is_a_condition_naming_the_object_and_the_api_message() -> None:
    failure = st.ApplyFailure("create Job/kj-r-gen", "Forbidden", "exceeded quota: q.")
    status = st.with_apply_result({"observedGeneration": 2, "conditions": []}, [failure], {}, "t")
    (cond,) = status["conditions"]
    assert (cond["type"], cond["status"], cond["reason"]) == ("ApplyFailed", "True", "Forbidden")
    assert cond["message"] == "The API server refused create Job/kj-r-gen: exceeded quota: q."
    cleared = st.with_apply_result(status, [], status, "later")
    assert cleared["conditions"][0]["status"] == "False"
    assert cleared["conditions"][0]["observedGeneration"] == 2
