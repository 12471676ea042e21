"""Token counts without a tokenizer: characters at a stated rate per language."""

from __future__ import annotations

import pytest

from kubejury.placement.workload import Workload, chars_per_token, tokens_of


def test_workload_from_texts_measures_the_questions() -> None:
    workload = Workload.from_texts([("a" * 40, "b" * 80), ("c" * 80, "d" * 160)], "en")
    assert workload.questions == 2
    assert workload.question_tokens == pytest.approx((10 + 20) / 2)  # 4 characters per token in English
    assert workload.reference_tokens == pytest.approx((20 + 40) / 2)
    with pytest.raises(ValueError):
        Workload.from_texts([], "en")


def test_rates_per_language() -> None:
    assert chars_per_token("en") == 4.0
    assert chars_per_token("ru-RU") == 3.0
    assert chars_per_token("de") == 3.5
    assert tokens_of("x" * 10, "en") == 3  # rounded up
    assert tokens_of("", "en") == 0


def test_a_workload_needs_questions_and_positive_lengths() -> None:
    with pytest.raises(ValueError):
        Workload(questions=0, question_tokens=1, reference_tokens=1)
    with pytest.raises(ValueError):
        Workload(questions=1, question_tokens=1, reference_tokens=1, answer_tokens=0)
