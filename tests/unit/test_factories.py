"""The shared test builders build what they say: cube layout, names and records; run-planning inputs."""

from __future__ import annotations

import math

import numpy as np
import pytest

from factories import (
    JOB_RUNNING,
    RUN_SERIES,
    build_cluster_run,
    endpoint,
    generation_jobs,
    present_for,
    score_cube,
    score_cube_by_id,
)

NAN = math.nan


def test_a_cube_from_scores_alone_names_models_judges_and_questions_by_position_in_one_domain_and_level() -> (
    None
):
    cube = score_cube(np.zeros((2, 12, 3)))
    assert cube.models == ("m0", "m1") and cube.judges == ("j0", "j1", "j2")
    assert cube.question_ids[:3] == ("q0", "q1", "q2") and cube.question_ids[-1] == "q11"
    assert cube.domains == ("d",) and cube.levels == (1,) and cube.series == "default"
    assert cube.has_record.all() and cube.answer_chars is None


def test_a_cube_keeps_the_question_order_given_and_indexes_sorted_domains_and_levels() -> None:
    questions = (("q1", "Law", 1), ("q3", "Med", 1), ("q2", "Law", 2), ("q4", "Med", 2))
    cube = score_cube(np.ones((1, 4, 1)), questions=questions)
    assert cube.question_ids == ("q1", "q3", "q2", "q4")
    assert cube.domains == ("Law", "Med") and cube.levels == (1, 2)
    assert cube.question_domain.tolist() == [0, 1, 0, 1]
    assert cube.question_level.tolist() == [0, 0, 1, 1]


def test_a_cube_carries_the_records_and_per_answer_figures_it_is_given() -> None:
    cube = score_cube(
        [[[9, 9], [8, 8]], [[7, 7], [NAN, NAN]]],
        has_record=[[True, True], [True, False]],
        completion_tokens=[[100.0, 300.0], [50.0, 999.0]],
    )
    assert cube.has_record.tolist() == [[True, True], [True, False]]
    assert cube.completion_tokens is not None and cube.completion_tokens[1, 1] == 999.0


def test_a_cube_by_id_sorts_questions_by_level_domain_and_id_and_marks_unasked_questions() -> None:
    questions = [("q2", "med", 1), ("q1", "law", 2), ("q0", "law", 1)]
    cube = score_cube_by_id(questions, {"alpha": {"q0": [1, 2], "q1": [3, 4], "q2": None}}, judges=("a", "b"))
    assert cube.question_ids == ("q0", "q2", "q1")
    assert cube.scores[0, 2].tolist() == [3.0, 4.0]
    assert cube.has_record.tolist() == [[True, False, True]]
    assert np.isnan(cube.scores[0, 1]).all()


def test_a_cube_refuses_scores_of_the_wrong_shape_for_its_names() -> None:
    with pytest.raises(ValueError, match="scores has shape"):
        score_cube(np.zeros((2, 2, 2)), models=("only-one",))


def test_the_default_cluster_run_has_three_models_one_judge_and_the_runs_series() -> None:
    run = build_cluster_run()
    assert [m.name for m in run.models] == ["a", "b", "c"] and [j.name for j in run.judges] == ["j"]
    assert run.series == RUN_SERIES and run.ref.name == "r"


def test_a_hosted_endpoint_has_no_placement_and_an_https_source() -> None:
    hosted = endpoint("judge", "gpt", runtime="openai")
    assert hosted.placement is None and hosted.source.startswith("https://")
    assert endpoint("model", "a").placement is not None


def test_observations_name_one_job_per_model_and_series_and_a_service_per_server() -> None:
    jobs = generation_jobs(["a", "b"], JOB_RUNNING)
    assert len(jobs) == 2 * len(RUN_SERIES) and set(jobs.values()) == {JOB_RUNNING}
    assert ("ConfigMap", "kj-r-spec") in present_for("m-a")
    assert len(present_for("m-a", "j-j")) == len(present_for()) + 2
