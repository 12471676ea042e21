"""kubejury_operator.status: the placement's prose leaves the status for ``Placement`` Events,
posted once per change of what the status records — never on a reconcile that changes nothing."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kubejury.records.placement import Placement, placement_notes
from kubejury.records.run_status import RunStatus
from kubejury_operator import status as st

GPU = Placement(
    name="qwen",
    runtime="vllm",
    quantization="fp8",
    tensor_parallel_size=1,
    gpu_product="NVIDIA-H100",
    reason="Hopper (CC 9.0): online FP8 of the bf16 checkpoint; TP 1 on 8 × NVIDIA-H100",
)
CPU = Placement(
    name="tiny", runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0, reason="GGUF on CPU"
)


def recorded(*placements: Placement) -> RunStatus:
    """The status as the next reconcile reads it back: through JSON, without the prose."""
    return RunStatus.from_json(RunStatus(phase="Provisioning", placement=placements).to_json())


def test_the_first_reconcile_posts_the_prose_of_every_placement() -> None:
    events = st.placement_events((GPU, CPU), RunStatus.from_json(None))
    assert {e.reason for e in events} == {"Placement"} and {e.type for e in events} == {"Normal"}
    assert placement_notes(e.message for e in events) == {"qwen": GPU.reason, "tiny": CPU.reason}


def test_a_placement_recorded_unchanged_posts_nothing_again() -> None:
    assert st.placement_events((GPU, CPU), recorded(GPU, CPU)) == ()


def test_only_the_placement_that_changed_is_posted_and_one_that_no_longer_fits_warns() -> None:
    unfit = replace(CPU, schedulable=False, reason="Unschedulable: needs about 90 GiB")
    events = st.placement_events((GPU, unfit), recorded(GPU, CPU))
    assert placement_notes(e.message for e in events) == {"tiny": unfit.reason}
    assert {e.type for e in events} == {"Warning"}


def test_a_status_written_with_prose_before_issue_26_counts_as_the_same_placement() -> None:
    old = RunStatus.from_json({"phase": "Generating", "placement": {"qwen": GPU.to_full_json()}})
    assert st.placement_events((GPU,), old) == ()


def test_the_before_design_of_the_benchmark_posts_no_placement_event(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(st, "FULL_STATUS", True)
    assert st.placement_events((GPU,), RunStatus.from_json(None)) == ()
