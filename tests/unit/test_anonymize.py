"""Anonymization: self-identifications replaced (never deleted), metadata removed, ids opaque, order seeded."""

from __future__ import annotations

import time

import pytest

from kubejury.judging.anonymize import (
    TOKEN_EN,
    TOKEN_RU,
    Scrubber,
    mapping_document,
    opaque_id,
    opaque_ids,
    shuffled,
)
from kubejury.judging.detection_text import DetectionText

RUN_MODELS = ("qwen3.5-27b", "gemma-4-31b", "gpt-oss-120b")
M, R = TOKEN_EN, TOKEN_RU


@pytest.mark.parametrize(
    ("answer", "judge_sees"),
    [
        # the table: what judges were shown before, and what they must see now
        (
            "I am applying the Black-Scholes model here: the option price is 4.2.",
            "I am applying the Black-Scholes model here: the option price is 4.2.",
        ),
        (
            "I'm using the CAPM model, so the cost of equity is 9%.",
            "I'm using the CAPM model, so the cost of equity is 9%.",
        ),
        (
            "Windows Server was developed by Microsoft; use Group Policy.",
            "Windows Server was developed by Microsoft; use Group Policy.",
        ),
        (
            "The dataset was created by Google Research in 2019.",
            "The dataset was created by Google Research in 2019.",
        ),
        ("I am GPT-OSS, and the term is three years.", f"I am {M}, and the term is three years."),
        # passed through unchanged before
        ("As Qwen, I think the period is three years.", f"As {M}, I think the period is three years."),
        ("Я Qwen, и срок — три года.", f"Я {R}, и срок — три года."),
        ("Как Qwen, я считаю, что срок — три года.", f"Как {R}, я считаю, что срок — три года."),
        ("Ответ подготовлен моделью Qwen.", f"Ответ подготовлен моделью {R}."),
        ("Qwen here: three years.", f"{M} here: three years."),
        ("Answer by Gemma: three years.", f"Answer by {M}: three years."),
        ("I, Qwen, say three years.", f"I, {M}, say three years."),
        ("Three years. (Generated with ChatGPT)", f"Three years. (Generated with {M})"),
        # and the ones that were deleted with their sentence
        (
            "I am Qwen, created by Alibaba Cloud. The limitation period is three years.",
            f"I am {M}, created by {M}. The limitation period is three years.",
        ),
        (
            "Я — модель Gemma, разработанная Google. Срок — три года.",
            f"Я — модель {R}, разработанная {R}. Срок — три года.",
        ),
        ("Меня зовут GigaChat. Три года.", f"Меня зовут {R}. Три года."),
        ("Ответ подготовил gpt-oss-120b: три года.", f"Ответ подготовил {R}: три года."),
    ],
)
def test_self_identification_is_replaced_and_nothing_else_changes(answer: str, judge_sees: str) -> None:
    assert Scrubber(RUN_MODELS).scrub(answer) == judge_sees


def test_replacements_list_every_changed_span_of_the_original() -> None:
    answer = "<think>Qwen thinks</think>I am Qwen, created by Alibaba Cloud. Три года.<|im_end|>"
    result = Scrubber(RUN_MODELS).anonymize(answer)
    assert [(r.original, r.token, r.reason) for r in result.replacements] == [
        ("<think>Qwen thinks</think>", "", "metadata"),
        ("Qwen", M, "self-identification"),
        ("Alibaba Cloud", M, "self-identification"),
        ("<|im_end|>", "", "metadata"),
    ]
    for r in result.replacements:
        assert answer[r.start : r.end] == r.original
    assert result.text == f"I am {M}, created by {M}. Три года."


@pytest.mark.parametrize(
    "answer",
    [
        "Срок исковой давности — три года (ст. 196 ГК РФ).",
        "Я считаю, что срок — три года.",
        "Google Cloud Run масштабирует контейнеры автоматически.",
        "Модель оценки рисков в банке — это внутренняя методика.",
        # formatting is the model's own and reaches the judge as written
        "## Ответ\r\n\r\n**Срок**  —  *три*   года.\n\n* пункт\n---\n<b>итог</b>",
        "```python\nclass A:\n    def __init__(self):\n        pass\n```",
    ],
)
def test_ordinary_content_is_kept_byte_for_byte(answer: str) -> None:
    assert Scrubber(RUN_MODELS).scrub(answer) == answer


def test_disguised_names_are_found_and_the_disguise_is_only_replaced_there() -> None:
    # zero-width split and full-width letters are seen through; the rest keeps its invisible characters
    answer = "I am Q\u200bwen. Срок\u200b — три года. I'm Ｇｅｍｍａ."
    assert Scrubber().scrub(answer) == f"I am {R}. Срок\u200b — три года. I'm {R}."


def tagged(text: str) -> str:
    """``text`` in Unicode tag characters: invisible on screen, readable by a model."""
    return "".join(chr(0xE0000 + ord(char)) for char in text)


def test_a_self_identification_hidden_in_tag_characters_is_removed() -> None:
    answer = "Срок — три года." + tagged("I am Qwen, made by Alibaba Cloud.")
    result = Scrubber().anonymize(answer)
    assert result.text == "Срок — три года."
    assert [r.reason for r in result.replacements] == ["hidden characters"]


@pytest.mark.parametrize(
    "disguised",
    [
        "Qwеn",  # Cyrillic е
        "Qwen\U000e0101",  # a supplementary variation selector
        "Q\u0301wen",  # a combining mark that composes with nothing
        "Qwén",  # a precomposed accented letter
        "ОреnАI",  # Cyrillic О, р, е, А
        "ІВМ",  # Ukrainian І, Cyrillic В, М
    ],
)
def test_homoglyphs_and_marks_in_a_name_are_seen_through(disguised: str) -> None:
    assert Scrubber().scrub(f"I am {disguised}, and the term is three years.") == (
        f"I am {M}, and the term is three years."
    )


def test_homoglyph_folding_never_rewrites_russian_words() -> None:
    russian = (
        "Река Ока, АО «Мета», СМС и ТВ: Сорок процентов — это верный ответ. ЯндексGPT и Сбер тут ни при чём."
    )
    assert DetectionText.of(russian).text == russian
    assert Scrubber(RUN_MODELS).scrub(russian) == russian


def test_the_runs_own_model_name_inside_a_longer_token_is_replaced() -> None:
    scrub = Scrubber(["qwen2.5-7b"]).scrub
    assert scrub("Use qwen2.5-7b-instruct or Qwen/qwen2.5-7b-instruct-GGUF:Q4_K_M here.") == (
        f"Use {M} or {M} here."
    )
    assert scrub("Served by Qwen2.5-7B-Instruct.") == f"Served by {M}."


@pytest.mark.parametrize(
    ("answer", "judge_sees"),
    [
        ("Три года.\n<!-- generated by Qwen2.5 -->", "Три года.\n"),
        ("<!-- model: qwen2.5-7b -->Три года.", "Три года."),
        ("Три года. <!-- ChatGPT -->", "Три года. "),
        ("Три года. <!--Ответ подготовлен моделью GigaChat-->", "Три года. "),
        # comments that name no generator are part of the answer
        ("<div><!-- TODO: table --></div>", "<div><!-- TODO: table --></div>"),
        (
            "<!-- Google Analytics -->\n<script src=ga.js></script>",
            "<!-- Google Analytics -->\n<script src=ga.js></script>",
        ),
    ],
)
def test_an_html_comment_naming_the_generator_is_removed(answer: str, judge_sees: str) -> None:
    assert Scrubber(["qwen2.5-7b"]).scrub(answer) == judge_sees


def test_metadata_is_removed() -> None:
    scrub = Scrubber(RUN_MODELS).scrub
    assert scrub("<think>Qwen thinks about it</think>Три года.") == "Три года."
    assert scrub("Три года.<|im_end|>") == "Три года."
    assert scrub("<start_of_turn>modelТри года.<end_of_turn>") == "Три года."


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
    assert doc.ids == {v: k for k, v in ids.items()}
    assert doc.seed == 1 and doc.series == "primary"


def test_long_sentences_are_bounded() -> None:
    tail = "and more words " * 40
    answer = f"I am Qwen {tail}. Three years."
    assert Scrubber(RUN_MODELS).scrub(answer) == answer.replace("Qwen", M, 1)


@pytest.mark.parametrize(
    "unit",
    [
        "I am a large language model and ",  # self-description words with no name, no punctuation
        "Я — большая языковая модель и ",
        "As a model, ",
        "<<<[[ ",
        "I am Qwen ",
        "x<think>",  # reasoning blocks that never close (the block search was quadratic: 17 s)
        "Answer by ",
    ],
)
def test_a_pathological_100_kb_answer_is_handled_in_bounded_time(unit: str) -> None:
    # Every pattern scans a bounded window, so the time grows linearly with the answer. The bound
    # asserted here is loose (two orders of magnitude above the ~0.1 s this takes) and only catches
    # a quadratic regression, which took 15 s on 100 KB before the windows were bounded.
    answer = unit * (100_000 // len(unit))
    started = time.perf_counter()
    result = Scrubber(RUN_MODELS).anonymize(answer)
    assert time.perf_counter() - started < 20
    assert len(result.text) >= len(answer) - 4 * len(result.replacements)
