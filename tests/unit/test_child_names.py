"""Names and labels of a run's children stay within what the API server accepts (the real API
server's verdict is in tests/integration/devcluster/test_child_names_on_cluster.py)."""

from __future__ import annotations

from kubejury.config.spec import JobSettings
from kubejury.redact import redact_tree
from kubejury_operator import manifests as mf
from kubejury_operator import status as st


def test_the_job_name_budget_leaves_room_for_the_largest_index_the_spec_allows() -> None:
    (bound,) = [m.le for m in JobSettings.model_fields["generation_shards"].metadata if hasattr(m, "le")]
    assert bound - 1 == mf.MAX_JOB_INDEX
    name = "r" * 63
    for job in (
        mf.generation_job_name(name, "m" * 40, "primary"),
        mf.judge_job_name(name, "j" * 40, "primary", 12),
        mf.aggregation_job_name(name),
    ):
        assert len(f"{job}-{mf.MAX_JOB_INDEX}") <= 63, job


def test_a_run_label_is_unchanged_when_valid_and_hashed_when_cut() -> None:
    assert mf.label_value("my-run") == "my-run"
    long = mf.label_value("a" * 70)
    assert len(long) <= 63 and long != mf.label_value("a" * 71)
    assert mf.label_value("a" * 63 + "x") != mf.label_value("a" * 63 + "y")


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
