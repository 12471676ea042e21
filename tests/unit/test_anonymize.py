"""Anonymization: self-identifications and metadata stripped, markup normalised, ids opaque, order seeded."""

from __future__ import annotations

import pytest

from kubejury.judging.anonymize import (
    Scrubber,
    mapping_document,
    normalise_markup,
    opaque_id,
    opaque_ids,
    shuffled,
)

RUN_MODELS = ("qwen3.5-27b", "gemma-4-31b", "gpt-oss-120b")


@pytest.mark.parametrize(
    ("answer", "kept"),
    [
        (
            "I am Qwen, created by Alibaba Cloud. The limitation period is three years.",
            "The limitation period is three years.",
        ),
        ("I'm an AI assistant developed by OpenAI. Three years.", "Three years."),
        ("As an AI developed by Google, I can say: three years.", "I can say: three years."),
        (
            "As a large language model, I must note the period is three years.",
            "I must note the period is three years.",
        ),
        ("Я — модель Gemma, разработанная Google. Срок — три года.", "Срок — три года."),
        ("Я - языковая модель. Срок исковой давности — три года.", "Срок исковой давности — три года."),
        ("Я являюсь ИИ-ассистентом компании Яндекс. Три года.", "Три года."),
        ("Как языковая модель, отмечу: срок — три года.", "отмечу: срок — три года."),
        ("Меня зовут GigaChat. Три года.", "Три года."),
        ("Ответ подготовил gpt-oss-120b: три года.", "Ответ подготовил [модель]: три года."),
        ("<think>Qwen thinks about it</think>Три года.", "Три года."),
        ("Три года.<|im_end|>", "Три года."),
        ("<start_of_turn>modelТри года.<end_of_turn>", "Три года."),
    ],
)
def test_self_identification_and_metadata_are_stripped(answer: str, kept: str) -> None:
    assert Scrubber(RUN_MODELS).scrub(answer) == kept


@pytest.mark.parametrize(
    "answer",
    [
        "Срок исковой давности — три года (ст. 196 ГК РФ).",
        "Я считаю, что срок — три года.",
        "Google Cloud Run масштабирует контейнеры автоматически.",
        "Модель оценки рисков в банке — это внутренняя методика.",
    ],
)
def test_ordinary_content_is_kept(answer: str) -> None:
    assert Scrubber(RUN_MODELS).scrub(answer) == answer


def test_markup_is_normalised() -> None:
    raw = "## Ответ\r\n\r\n**Срок**  —  *три*   года.\n\n\n\n* пункт 1\n+ пункт 2\n• пункт 3\n---\n<b>итог</b><br>конец  "
    assert (
        normalise_markup(raw) == "Ответ\n\nСрок — три года.\n\n- пункт 1\n- пункт 2\n- пункт 3\n\nитог\nконец"
    )


def test_same_content_in_different_styles_looks_the_same() -> None:
    a = "### Итог\n**Три года**, см. *ст. 196*.\n\n\n- да"
    b = "Итог\nТри года, см. ст. 196.\n\n* да   "
    scrub = Scrubber(RUN_MODELS).scrub
    assert scrub(a) == scrub(b)


def test_opaque_ids_are_stable_distinct_and_meaningless() -> None:
    ids = opaque_ids(RUN_MODELS, seed=7)
    assert ids == opaque_ids(RUN_MODELS, seed=7)
    assert len(set(ids.values())) == 3
    assert all(v.startswith("a-") and len(v) == 12 for v in ids.values())
    for model, ident in ids.items():
        assert model.split("-")[0] not in ident
    assert opaque_ids(RUN_MODELS, seed=8) != ids
    assert opaque_id("x", 1) != opaque_id("x", 2)


def test_shuffle_is_seeded() -> None:
    items = list(range(50))
    assert shuffled(items, 3) == shuffled(items, 3)
    assert shuffled(items, 3) != shuffled(items, 4)
    assert sorted(shuffled(items, 3)) == items
    assert shuffled(items, 3) != items


def test_mapping_document_maps_ids_back() -> None:
    ids = opaque_ids(RUN_MODELS, seed=1)
    doc = mapping_document(ids, 1, "primary")
    assert doc["ids"] == {v: k for k, v in ids.items()}
    assert doc["seed"] == 1 and doc["series"] == "primary"


def test_long_sentences_are_bounded() -> None:
    # a self-identification followed by a very long unpunctuated tail: only a bounded part goes
    tail = "and more words " * 40
    out = Scrubber(RUN_MODELS).scrub(f"I am Qwen {tail}. Three years.")
    assert "Qwen" not in out and out.endswith("Three years.")
