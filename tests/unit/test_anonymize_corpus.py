"""The anonymizer measured on a labelled corpus: it finds self-identifications and changes nothing else.

``tests/data/anonymizer-corpus.jsonl`` holds hand-written English and Russian sentences. Those
labelled ``self_id`` are a model naming itself or its maker (at least twelve families, in many
phrasings), with the exact spans that must be hidden; those labelled ``legit`` mention models,
companies, "developed by", "created by" and "I am using" as an answer legitimately would, and must
reach the judge unchanged. The two figures the method promises — recall on self-identification and
characters changed in legitimate sentences — are printed in the test output and quoted in
docs/method.md.

The ``grammar-*`` items (issue 28, section 2) test the self-reference grammar: a name in a role
prefix ("Speaking as Qwen:"), an attribution dash opening a line ("— Qwen: …"), a
self-description naming the maker ("As Qwen, trained by Alibaba Cloud, …"), a signature and other
first-person wordings, in English and Russian, beside sentences where a model is only the topic
("Лицензия Qwen разрешает…"). Measured before the grammar existed, on this same corpus: removal
274/333 (82.3%; 3 of the 62 grammar traps), false removal 0/282 legitimate sentences. The test
prints the figures it computes now and holds them to the thresholds below.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from kubejury.judging.anonymize import Anonymized, Scrubber

CORPUS = Path(__file__).resolve().parents[1] / "data" / "anonymizer-corpus.jsonl"
RUN_MODELS = ("qwen3.5-27b", "gemma-4-31b", "gpt-oss-120b")
RECALL_FLOOR = 0.95  # removal rate: self-identifications whose every labelled name is replaced
FALSE_REMOVAL_CEILING = 0.0  # false-removal rate: legitimate sentences with any character changed


def load_corpus() -> list[dict[str, Any]]:
    return [json.loads(line) for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.strip()]


ITEMS = load_corpus()


def covered(item: dict[str, Any], result: Anonymized) -> bool:
    """Every expected span lies inside a replaced span."""
    hidden = {i for r in result.replacements for i in range(r.start, r.end)}
    return all(set(range(span["start"], span["end"])) <= hidden for span in item["spans"])


def rebuilt(text: str, result: Anonymized) -> str:
    out, position = [], 0
    for r in result.replacements:
        out += [text[position : r.start], r.token]
        position = r.end
    return "".join([*out, text[position:]])


def test_corpus_is_large_bilingual_and_labelled() -> None:
    labels = Counter((item["language"], item["label"]) for item in ITEMS)
    assert len(ITEMS) >= 300
    assert all(labels[(lang, label)] >= 50 for lang in ("en", "ru") for label in ("self_id", "legit"))
    for item in ITEMS:
        for span in item["spans"]:
            assert item["text"][span["start"] : span["end"]] == span["text"], item["id"]
    issue_examples = {
        "I am applying the Black-Scholes model here: the option price is 4.2.",
        "I'm using the CAPM model, so the cost of equity is 9%.",
        "Windows Server was developed by Microsoft; use Group Policy.",
        "The dataset was created by Google Research in 2019.",
        "I am GPT-OSS, and the term is three years.",
        "Ответ подготовлен моделью Qwen.",
        "(Generated with ChatGPT)",
    }
    assert issue_examples <= {item["text"] for item in ITEMS}


def test_every_self_reference_form_has_english_and_russian_traps_and_topic_sentences() -> None:
    for language in ("en", "ru"):
        traps = [i for i in ITEMS if i["id"].startswith(f"grammar-selfid-{language}-")]
        topics = [i for i in ITEMS if i["id"].startswith(f"grammar-legit-{language}-")]
        assert len(traps) >= 30 and len(topics) >= 15, language
    texts = {item["text"] for item in ITEMS}
    forms = {
        "Speaking as Qwen: the readiness probe gates traffic, the liveness probe restarts the pod.",
        "— Qwen: the answer is three years.",
        "As Qwen, trained by Alibaba Cloud, my answer is three years.",
        "Говорю как Qwen: срок исковой давности — три года.",
        "— Qwen: срок — три года.",
        "Как Qwen, обученная Alibaba Cloud, отвечу: срок — три года.",
        "The Qwen license allows commercial use below 100 million monthly active users.",
        "Лицензия Qwen разрешает коммерческое использование.",
        "Сравним GPT-4 и Llama по качеству ответов на русском языке.",
    }
    assert forms <= texts


@pytest.mark.parametrize("subset", ["corpus", "grammar"])
def test_removal_and_false_removal_rates(subset: str, capsys: pytest.CaptureFixture[str]) -> None:
    items = [item for item in ITEMS if subset == "corpus" or item["id"].startswith("grammar-")]
    self_ids = [item for item in items if item["label"] == "self_id"]
    legit = [item for item in items if item["label"] == "legit"]
    removal, false_removal, failures = rates(Scrubber(RUN_MODELS), self_ids, legit)
    with capsys.disabled():
        print(
            f"\n{subset} ({len(items)} sentences): removal rate {removal:.1%} of {len(self_ids)} "
            f"self-identifications; false-removal rate {false_removal:.1%} of {len(legit)} legitimate sentences"
        )
        for line in failures:
            print("  " + line)
    assert removal >= RECALL_FLOOR, "\n".join(failures)
    assert false_removal <= FALSE_REMOVAL_CEILING, "\n".join(failures)


def rates(
    scrubber: Scrubber, self_ids: list[dict[str, Any]], legit: list[dict[str, Any]]
) -> tuple[float, float, list[str]]:
    """``(removal rate, false-removal rate, the items that failed)``."""
    missed = [i for i in self_ids if not covered(i, scrubber.anonymize(i["text"]))]
    damaged = [i for i in legit if scrubber.scrub(i["text"]) != i["text"]]
    failures = [f"{i['id']}: {i['text']!r} -> {scrubber.scrub(i['text'])!r}" for i in missed + damaged]
    return 1 - len(missed) / len(self_ids), len(damaged) / len(legit), failures


def test_recall_and_untouched_legitimate_text(capsys: pytest.CaptureFixture[str]) -> None:
    scrubber = Scrubber(RUN_MODELS)
    self_ids = [item for item in ITEMS if item["label"] == "self_id"]
    legit = [item for item in ITEMS if item["label"] == "legit"]
    missed, damaged, extra_chars = [], [], 0
    for item in self_ids:
        result = scrubber.anonymize(item["text"])
        assert result.text == rebuilt(item["text"], result), item["id"]  # nothing changed outside the spans
        if not covered(item, result):
            missed.append(f"{item['id']}: {item['text']!r} -> {result.text!r}")
        expected = {i for span in item["spans"] for i in range(span["start"], span["end"])}
        extra_chars += sum(1 for r in result.replacements for i in range(r.start, r.end) if i not in expected)
    changed_chars = 0
    for item in legit:
        result = scrubber.anonymize(item["text"])
        changed = sum(r.end - r.start for r in result.replacements)
        if changed or result.text != item["text"]:
            changed_chars += changed or 1
            damaged.append(f"{item['id']}: {item['text']!r} -> {result.text!r}")
    recall = 1 - len(missed) / len(self_ids)
    with capsys.disabled():
        print(
            f"\nanonymizer corpus ({len(ITEMS)} sentences): recall on self-identification "
            f"{len(self_ids) - len(missed)}/{len(self_ids)} = {recall:.1%}; "
            f"characters changed in {len(legit)} legitimate sentences: {changed_chars}; "
            f"characters replaced beyond the labelled spans in self-identifications: {extra_chars}"
        )
        for line in missed + damaged:
            print("  " + line)
    assert recall >= RECALL_FLOOR, "\n".join(missed)
    assert not damaged, "\n".join(damaged)
