"""What a run asks, in tokens: the questions' count and lengths, and the answers' and verdicts'.

Why this module exists: ``kubejury plan --estimate`` must turn a benchmark into token counts
without a tokenizer (plan runs offline, in a second). Lengths are measured in characters and
converted at a stated rate per language; answer and verdict lengths are expectations the user can
override. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: Characters per token of the benchmark's language (modern 100K+ vocabularies; Cyrillic is denser).
CHARS_PER_TOKEN: dict[str, float] = {"en": 4.0, "ru": 3.0}
CHARS_PER_TOKEN_OTHER = 3.5
#: Tokens the chat template adds around each request's messages.
CHAT_TEMPLATE_TOKENS = 20
#: Expected answer and verdict lengths when not given (each capped by the spec's maxTokens).
DEFAULT_ANSWER_TOKENS = 800
DEFAULT_VERDICT_TOKENS = 250
#: Mean question and reference lengths when the benchmark is not read (``--questions N``).
DEFAULT_QUESTION_TOKENS = 60
DEFAULT_REFERENCE_TOKENS = 120
#: vLLM's default max_num_seqs for its API server: 1024 on GPUs with ≥ 70 GiB that are not A100s, else 256.


def chars_per_token(language: str) -> float:
    return CHARS_PER_TOKEN.get(language.lower().split("-")[0], CHARS_PER_TOKEN_OTHER)


def tokens_of(text: str, language: str) -> int:
    """Tokens of ``text`` estimated from its length (see :data:`CHARS_PER_TOKEN`)."""
    return math.ceil(len(text) / chars_per_token(language))


@dataclass(frozen=True)
class Workload:
    """What the benchmark contributes: how many questions, and how long they and their references are."""

    questions: int
    question_tokens: float  # mean per question
    reference_tokens: float  # mean per reference answer
    answer_tokens: int = DEFAULT_ANSWER_TOKENS  # expected answer length (before maxTokens caps)
    verdict_tokens: int = DEFAULT_VERDICT_TOKENS  # expected verdict length (before judging.maxTokens)
    source: str = ""  # where the counts come from

    def __post_init__(self) -> None:
        if self.questions < 1:
            raise ValueError("an estimate needs at least one question")
        if self.answer_tokens < 1 or self.verdict_tokens < 1:
            raise ValueError("answer and verdict lengths must be at least 1 token")

    @classmethod
    def from_texts(
        cls,
        pairs: Sequence[tuple[str, str]],
        language: str,
        *,
        answer_tokens: int = DEFAULT_ANSWER_TOKENS,
        verdict_tokens: int = DEFAULT_VERDICT_TOKENS,
        source: str = "",
    ) -> Workload:
        """From the (question, reference) texts of the questions the run will ask."""
        if not pairs:
            raise ValueError("an estimate needs at least one question")
        return cls(
            questions=len(pairs),
            question_tokens=sum(tokens_of(q, language) for q, _ in pairs) / len(pairs),
            reference_tokens=sum(tokens_of(r, language) for _, r in pairs) / len(pairs),
            answer_tokens=answer_tokens,
            verdict_tokens=verdict_tokens,
            source=source,
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "questions": self.questions,
            "mean_question_tokens": round(self.question_tokens, 1),
            "mean_reference_tokens": round(self.reference_tokens, 1),
            "answer_tokens": self.answer_tokens,
            "verdict_tokens": self.verdict_tokens,
            "source": self.source,
        }
