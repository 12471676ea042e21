"""Anonymization of answers before any judge sees them (the study's bias precaution, made checkable).

A judge must not know which model wrote an answer, or it may favour its own family. So, before
judging: model names become opaque ids (a keyed hash of the name and the run's seed, so the same
run always maps the same way and different runs do not), and the judging order is shuffled with
the seed; the mapping id → model is kept separately (the judging stage stores it next to, not
inside, what judges see). In the answer itself:

- **Self-identification is replaced, never deleted.** "I am Qwen, created by Alibaba Cloud." becomes
  "I am [model], created by [model]."; the name of a family or maker is replaced by a neutral token
  only where the model speaks about itself ("I am …", "As …, I", "Answer by …:", "Я — модель …",
  "Ответ подготовлен моделью …"). "Windows Server was developed by Microsoft" is an answer, not a
  self-identification, and reaches the judge unchanged: every character outside a replaced span
  stays byte for byte. The run's own model names are replaced wherever they occur.
- **Metadata is removed:** reasoning blocks (``<think>…</think>``) and chat-template tokens
  (``<|im_end|>``) are not part of the answer and name the family by their shape.

Detection runs on :class:`~kubejury.judging.detection_text.DetectionText` (NFKC, no zero-width or
bidi controls), so "Ｑｗｅｎ" or "Q\u200bwen" is found too. Every pattern scans a bounded window,
so the time is linear in the answer's length. The labelled corpus in ``tests/data`` measures recall
and damage (docs/method.md). Everything here is pure and deterministic for a given seed.
"""

from __future__ import annotations

import bisect
import hashlib
import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from kubejury.judging.detection_text import DetectionText, hidden_spans, merge_spans
from kubejury.records.anonymization import AnonymizationMap

T = TypeVar("T")

#: Raise when the scrubber changes what a judge sees: judgments made by another version are never
#: copied into a run (``kubejury.provenance.judging_fingerprint``, issue 24).
ANONYMIZER_VERSION = 1

TOKEN_EN = "[model]"
TOKEN_RU = "[модель]"

# Families and makers a model names when it introduces itself. Case-sensitive as written (they are
# names); right after a self-identifying phrase they are also matched in any case ("i am chatgpt").
_LATIN_IDENTITIES = (
    r"ChatGPT", r"GPT", r"OpenAI", r"Open AI", r"Qwen", r"QwQ", r"Tongyi(?: Qianwen)?", r"Alibaba(?: Cloud)?",
    r"Gemma", r"Gemini", r"Bard", r"Google(?: DeepMind| Research| Brain)?", r"DeepMind", r"Llama", r"LLaMA",
    r"Meta(?: AI)?", r"Mistral(?: AI)?", r"Mixtral", r"Codestral", r"Ministral", r"DeepSeek", r"ChatGLM",
    r"GLM", r"Zhipu(?: AI)?", r"Z\.ai", r"Claude", r"Anthropic", r"Nemotron", r"NVIDIA", r"Nvidia", r"Phi",
    r"Microsoft(?: Copilot)?", r"Copilot", r"YandexGPT", r"Yandex", r"Alice", r"GigaChat", r"SberDevices",
    r"Sber", r"Saiga", r"Vikhr", r"T-Pro", r"T-Lite", r"T-Bank", r"Tinkoff", r"Command(?= R| A)", r"Cohere",
    r"Aya", r"Grok", r"xAI", r"Kimi", r"Moonshot(?: AI)?", r"MiniMax", r"Baichuan(?: Intelligence)?", r"Yi",
    r"01\.AI", r"InternLM", r"Shanghai AI Lab(?:oratory)?", r"Falcon", r"TII",
    r"Technology Innovation Institute", r"OLMo", r"Ai2", r"AI2", r"Allen Institute(?: for AI)?", r"Granite",
    r"IBM", r"ERNIE(?: Bot)?", r"Baidu", r"Hunyuan", r"Tencent", r"Doubao", r"ByteDance", r"Jamba",
    r"AI21(?: Labs)?", r"Upstage", r"StableLM", r"Stability AI", r"SmolLM", r"Hugging Face", r"Vicuna",
    r"Zephyr", r"Reka",
)  # fmt: skip
# Russian names decline: "компанией Яндекс", "от Яндекса", "в Сбере", "модель Т-Банка".
_CYRILLIC_IDENTITIES = (
    r"ЯндексGPT", r"Яндекс", r"Алис[аеуыо]й?", r"ГигаЧат", r"Сбер(?:банк)?", r"Т-Банк", r"Тинькофф",
    r"Гугл", r"Майкрософт", r"Квен", r"Опен ?ЭйАй",
)  # fmt: skip
# What may follow a family name as part of it: versions, sizes and edition words ("Qwen2.5-72B-Instruct",
# "Claude 3.5 Sonnet", "Mixtral 8x7B", "GPT-4o mini", "Command R+").
_TAIL_WORDS = (
    r"OSS|Instruct|Chat|Coder|Turbo|Pro|Flash|Ultra|Nano|Mini|Max|Plus|Large|Small|Medium|Opus|Sonnet|Haiku|"
    r"Lite|Air|Next|Nemo|Bot|Base|Preview|Omni|Vision|VL|R|A|[RVM]\d+(?:\.\d+)*"
)
_TAIL = rf"(?:(?:[-. ]?\d+(?:[.,x]\d+)*[A-Za-z]?\b|[- ](?:{_TAIL_WORDS})\b|\+))*"
# A Latin name ends where letters end (a digit may follow: "Qwen2.5"); a Russian one may take a case ending.
_IDENT_CORE = (
    "(?:"
    + "|".join(rf"{name}(?![^\W\d])" for name in _LATIN_IDENTITIES)
    + "|"
    + "|".join(rf"{name}(?:а|у|ом|е|ой)?(?!\w)" for name in _CYRILLIC_IDENTITIES)
    + ")"
)

# Words a model uses to describe itself ("a large language model trained by", "ИИ-ассистент компании").
_LEX_EN = (
    r"a|an|the|your|my|in|of|by|from|at|on|as|part|with|called|named|known|large|small|compact|big|open|"
    r"open-source|open-weight|new|latest|helpful|friendly|harmless|honest|virtual|conversational|generative|"
    r"multilingual|bilingual|multimodal|russian-language|ai|a\.i\.|artificial|intelligence|language|model|"
    r"models|llm|assistant|chatbot|bot|companion|neural|network|system|version|variant|edition|release|"
    r"fine-tuned|instruction-tuned|distilled|quantized|based|powered|trained|developed|created|built|made|"
    r"designed|released|published|family|series|team|lab|research|researchers|engineers|company"
)
_LEX_RU = (
    r"модел[ьияю]\w*|языков\w+|больш\w+|ИИ(?:-\w+)?|ассистент\w*|помощник\w*|нейросет\w*|нейронн\w+|сеть\w*|"
    r"чат-бот\w*|бот\w*|виртуальн\w+|голосов\w+|русскоязычн\w+|открыт\w+|мультимодальн\w+|искусственн\w+|"
    r"интеллект\w*|верси\w+|продукт\w*|разработк\w*|разработан\w*|созданн?\w*|обучен\w*|дообучен\w*|"
    r"основан\w*|выпущен\w*|компани\w+|команд\w+|семейств\w+|серии|линейк\w+|специалист\w*|инженер\w*|"
    r"лаборатори\w+|весами|от|из|на|основе|базе|с|в|со"
)
# The nouns of a self-description ("an enterprise model", "модель французской компании").
_LEX_NOUN = (
    r"(?:models?|assistant|chatbot|bot|llm|ai|companion|system|company|lab|team|модел[ьияю]\w*|ассистент\w*|"
    r"помощник\w*|нейросет\w*|компани\w+|команд\w+|лаборатори\w+|разработк\w*|продукт\w*)(?![\w-])"
)
_SEP = r"[\s,]+"
_LEX = rf"(?:(?:{_LEX_EN}|{_LEX_RU})(?![\w-]))"
_WORDS = rf"(?:{_LEX}{_SEP}){{0,8}}?"
# After the name, in the rest of the self-description, any one word may also stand before such a
# noun; before the name it may not ("Я использую модель, созданную OpenAI" is not about itself).
_CHAIN_WORD = rf"(?:{_LEX}|[\w-]+(?=[\s-]+{_LEX_NOUN})|(?<=\b(?:in|at)\s)[\w-]+(?=\s+(?:by|from)\b))"
_I_PRONOUN = r"(?:I|I'm|I’m|I'd|I’d|I'll|I’ll|I've|I’ve|my|me|я|мне|меня|мой|моя|моё|мои)(?!\w)"
# Where a phrase may begin: the start of the text, a line or a sentence, or inside brackets.
_START = r"(?:^|(?<=[.!?…]\s)|(?<=[.!?…]\s\s)|(?<=[(\[«\"“]))[ \t]*"
# … and, for "Kimi here!", also after a greeting's comma ("Hi, Kimi here!").
_GREETING_START = r"(?:^|(?<=[.!?…]\s)|(?<=[.!?…]\s\s)|(?<=[(\[«\"“])|(?<=,\s))[ \t]*"
# What may close a labelling phrase ("Answer by Gemma:", "(Generated with ChatGPT)").
_LABEL_END = r"(?=\s*(?:\([^()\n]{0,60}\))?\s*(?:[:.!)\]—–]|-\s|$))"
# What follows a name the speaker gives itself: the end of a clause, a conjunction, or more words of
# self-description ("I'm Qwen, …", "I am ChatGPT from OpenAI", "Я — Gemma от Google") — not
# "I'm a Microsoft certified engineer" or "Я в Сбере работаю".
_SELF_END = (
    r"(?=\s*(?:[,.;:!?)…—–]|$)|\s+(?:and|but|so|to|here|speaking|и|а|но|для|чтобы|здесь)(?!\w)"
    rf"|(?:[\s-]+{_LEX})+(?:[\s,.;:!?)…—–]|$))"
)
_WINDOW = 200

# The grammar of self-reference beyond "I am …": positions in which a name can only be the speaker's
# own. Each position is written once and combined with every name form (a family or maker, any case,
# versions and sizes attached, a Russian case ending, the run's own model names).
# Role prefixes: "Speaking as Qwen:", "Answering on behalf of Mistral AI —", "Отвечаю от имени GigaChat:".
_ROLE_EN = (
    r"(?:speaking|writing|answering|replying|responding|talking|commenting|posting|acting)\s+"
    r"(?:as|on\s+behalf\s+of|in\s+the\s+role\s+of)"
)
_ROLE_RU = (
    r"(?:(?:говорю|пишу|отвечаю|выступаю|говоря|отвечая|выступая)\s+(?:как|в\s+роли|от\s+имени|от\s+лица|"
    r"в\s+качестве)|от\s+(?:имени|лица)|в\s+роли)"
)
# What closes a role prefix: more words about the model, an optional "(assistant)", then a colon or dash.
_ROLE_END = rf"(?=(?:[\s-]+{_LEX}){{0,3}}\s*(?:\([^()\n]{{0,40}}\)\s*)?(?:[:,;—–]|-\s|$))"
# Participles of a self-description ("As Qwen, trained by Alibaba", "Как Qwen, обученная Alibaba").
_MADE_EN = r"(?:trained|developed|created|built|made|designed|released|fine-tuned|produced|published)(?!\w)"
_MADE_RU = r"(?:обучен|разработан|создан|выпущен|натренирован|сделан|построен|дообучен)\w*"
# Closings that sign the end of an answer ("Yours truly, GPT-4o", "Искренне ваша, Алиса", "Ваш GigaChat").
_CLOSING = (
    r"signed|yours(?:\s+(?:truly|sincerely|faithfully))?|sincerely(?:\s+yours)?|best(?:\s+(?:wishes|regards))?|"
    r"all\s+the\s+best|warm(?:est)?\s+regards|kind\s+regards|regards|cheers|thanks|thank\s+you|take\s+care|"
    r"your\s+(?:\w+\s+)?(?:assistant|helper|ai|bot|model)|с\s+уважением|с\s+наилучшими\s+пожеланиями|"
    r"всего\s+(?:доброго|хорошего|наилучшего)|(?:искренне|всегда)\s+ваш[аеи]?|ваш[аеи]?(?:\s+\w+)?|подпись|"
    r"до\s+связи|спасибо|удачи|хорошего\s+дня"
)
_YOUR = r"(?:(?:ваш[аеи]?|your)\s+)?"
# A line that opens with a dash ("— Qwen: …") names its author unless it is an item of a dashed list.
_BULLET_LINE = re.compile(r"^[ \t]*(?:[—–•*-]|\d+[.)])", re.M)


def _patterns(ident: str) -> list[re.Pattern[str]]:
    """Self-identifying phrases; each captures the family or maker it names as ``id``."""
    any_case = rf"(?P<id>(?i:{ident}){_TAIL})"
    flags = re.IGNORECASE | re.MULTILINE
    sources = [
        # "I am Qwen", "I'm an AI assistant developed by OpenAI", "I was trained by Zhipu AI", "Im qwen"
        rf"\b(?:I\s+am|I'm|I’m|Im|I\s+was)\s+{_WORDS}{any_case}{_SELF_END}",
        # "I, Qwen, …" / "Я, Qwen, …"
        rf"(?<!\w)(?:I|Я),\s+{any_case}\s*,",
        # "As Qwen, I think", "As an AI developed by Google, I", "As a Llama-based assistant, I"
        rf"\bAs\s+{_WORDS}{any_case}(?=(?:[\s,-]+{_LEX}){{0,4}}\s*,?\s*{_I_PRONOUN})",
        # "Qwen here:", "Claude speaking —", "GigaChat на связи."
        rf"{_GREETING_START}{any_case}\s+(?:here|speaking|на\s+связи|здесь)\s*(?=[:,.!—–-]|$)",
        # "This is Qwen speaking:", "This is ChatGPT, and …"
        rf"\bThis\s+is\s+{any_case}(?=\s*(?:[,.!:—–]|speaking|here|$))",
        # "Answer by Gemma:", "(Generated with ChatGPT)", "Response from GPT-4o:", "Written by Gemma 3."
        rf"{_START}(?:answer(?:ed)?|response|reply|replied|output|written|generated|produced|created|composed|"
        rf"prepared|powered)(?:\s+(?:generated|written|produced|prepared))?\s+(?:by|from|with|using)\s+"
        rf"(?:(?:the|a|an|model|assistant)\s+)?{any_case}{_LABEL_END}",
        # "This answer was generated by Llama-3.", "This text was written with ChatGPT."
        rf"\b(?:this|the|my)\s+(?:answer|response|reply|text|output|message)\s+(?:was|is|has\s+been)\s+"
        rf"(?:generated|written|produced|prepared|created|composed)\s+(?:by|with|using)\s+{_WORDS}{any_case}",
        # "My name is Gemma", "Call me Grok", "My developer is Alibaba Cloud", "My creators at Google DeepMind"
        rf"\b(?:my\s+name\s+is|my\s+name's|call\s+me|my\s+(?:developers?|creators?|makers?|publisher|vendor)"
        rf"(?:\s+(?:is|are|at|was|were))?[\s:—–-]*|I\s+come\s+from|I\s+belong\s+to)\s+{_WORDS}{any_case}",
        # "Model: qwen2.5", "Assistant: Llama-3", "Модель: qwen3-32b" — a capitalised label on a line of its
        # own, not a configuration key ("  model: gpt-4o" in a YAML answer)
        rf"^(?-i:Model|Assistant|Author|Модель|Ассистент|Автор)[ \t]*:[ \t]*{any_case}[ \t]*$",
        # "Best regards, ChatGPT", "С уважением, GigaChat" (not a bare "— Claude" line: that is also a list item)
        rf"(?:best\s+regards|kind\s+regards|regards|sincerely|cheers|с\s+уважением),?\s*{any_case}",
        # "Я Qwen", "Я — модель Gemma", "Я являюсь ИИ-ассистентом компании Яндекс", "я разработан в Сбере"
        rf"(?<!\w)Я\s*(?:[—–-]\s*)?(?:являюсь\s+|был[аи]?\s+|есть\s+|работаю\s+на\s+базе\s+|принадлежу\s+к\s+)?"
        rf"{_WORDS}{any_case}{_SELF_END}",
        # "Как Qwen, я", "Как языковая модель, разработанная Alibaba, я", "Будучи моделью Qwen, я"
        rf"(?<!\w)(?:Как|Будучи|В\s+качестве)\s+{_WORDS}{any_case}"
        rf"(?=(?:[\s,-]+{_LEX}){{0,4}}\s*,?\s*{_I_PRONOUN})",
        # "Ответ подготовлен моделью Qwen", "Этот текст был создан с помощью Claude", "Ответ подготовил GigaChat"
        rf"{_START}(?:(?:этот|данный|мой|ваш)\s+)?(?:ответ|текст)\s+(?:был\s+)?(?:подготовлен|сгенерирован|"
        rf"написан|создан|составлен|дан|подготовил|написал|сгенерировал)\w*\s+(?:с\s+помощью\s+)?{_WORDS}{any_case}",
        # "Ответ от Gemma:", "Ответ модели Qwen3:", "Отвечает YandexGPT:", "Сгенерировано с помощью ChatGPT"
        rf"{_START}(?:ответ\s+(?:от|модели)|отвечает(?:\s+модель)?|сгенерировано|подготовлено|написано|создано|"
        rf"составлено)(?:\s+с\s+помощью)?\s+(?:(?:модел\w+|ассистент\w*|нейросеть\w*)\s+)?{any_case}{_LABEL_END}",
        # "Меня зовут GigaChat", "Меня создала компания Alibaba Cloud", "Мой разработчик — Alibaba Cloud"
        rf"(?<!\w)(?:меня\s+зовут|зовите\s+меня|мо[ёе]\s+имя|меня\s+(?:созда|разработа|обучи|выпусти)\w*|"
        rf"мо(?:й|и)\s+(?:разработчик|создател)\w*|я\s+принадлежу\s+к)[\s:—–-]*{_WORDS}{any_case}",
    ]
    return [re.compile(source, flags) for source in [*sources, *_grammar(ident, any_case)]]


def _grammar(ident: str, any_case: str) -> list[str]:
    """The self-referential positions beyond the phrases above, each with the name slot ``any_case``."""
    names = rf"(?i:{ident}){_TAIL}"
    return [
        # role prefix: "Speaking as Qwen:", "Writing as GPT-4o, I…", "Говорю как Qwen:", "От лица Gemma:"
        rf"{_START}(?:{_ROLE_EN}|{_ROLE_RU})\s+{_WORDS}{any_case}{_ROLE_END}",
        # the end of an answer signed: "Yours truly, GPT-4o", "All the best,\nMistral", "Ваш GigaChat"
        rf"(?:^|(?<=[.!?…]\s)|(?<=[.!?…]\s\s))[ \t]*(?:{_CLOSING})[ \t]*[,:!.]?[ \t]*(?:[—–-][ \t]*)?\s*"
        rf"{_YOUR}{any_case}(?=[ \t]*[.!)]?\s*\Z)",
        # … or a dash after the last sentence: "Thanks for asking! — Gemini"
        rf"(?<=[.!?…])[ \t]+[—–][ \t]*{_YOUR}{any_case}(?=[ \t]*[.!]?\s*\Z)",
        # self-description naming the maker: "As Qwen, trained by Alibaba Cloud, …", "Как YandexGPT от Яндекса"
        rf"\b(?:As|Being)\s+{_WORDS}{any_case}(?=\s*,\s*{_WORDS}{_MADE_EN}|\s+(?:from|by)\s+{names})",
        rf"\b(?:As|Being)\s+{_WORDS}{any_case}(?=(?:[\s,-]+(?:{_LEX}|{names})){{0,6}}\s*,?\s*{_I_PRONOUN})",
        rf"(?<!\w)(?:Как|Будучи|В\s+качестве)\s+{_WORDS}{any_case}"
        rf"(?=\s*,?\s*{_WORDS}{_MADE_RU}|\s+(?:от|из)\s+{names})",
        # a participle opening the sentence whose subject is the speaker: "Trained by Anthropic, I …"
        rf"{_START}(?:{_MADE_EN}\s+(?:by|at|in)|{_MADE_RU})\s+{_WORDS}{any_case}"
        rf"(?=[^.!?\n]{{0,80}}?,\s*{_I_PRONOUN})",
        # the reader addressed: "You are talking to Qwen", "Вы общаетесь с Gemma", "С вами GigaChat"
        rf"\byou(?:\s+are|'re|’re)\s+(?:talking|chatting|speaking|writing)\s+(?:to|with)\s+{_WORDS}{any_case}{_SELF_END}",
        rf"(?<!\w)вы\s+(?:общаетесь|говорите|разговариваете|беседуете|переписываетесь)\s+со?\s+{_WORDS}{any_case}"
        rf"{_SELF_END}",
        rf"{_GREETING_START}(?:с\s+вами|на\s+связи|вас\s+приветствует|вам\s+отвечает|вам\s+пишет)\s+{_WORDS}"
        rf"{any_case}{_SELF_END}",
        rf"(?:hello|hi|hey|greetings|здравствуйте|привет|добрый\s+(?:день|вечер)|доброе\s+утро)[,!.]?\s+"
        rf"(?:это|this\s+is|it's|it’s|here\s+is)\s+{_WORDS}{any_case}{_SELF_END}",
        rf"{_GREETING_START}{any_case},?\s+(?:at\s+your\s+service|к\s+вашим\s+услугам)",
        # the speaker pointed at: "It's me, GPT-4o", "Это я, Qwen", "Мне, как GPT-4, …", "I go by Mistral"
        rf"\b(?:it's|it’s|it\s+is|this\s+is)\s+me[,\s—–-]+{_WORDS}{any_case}",
        rf"(?<!\w)это\s+я[,\s—–-]+{_WORDS}{any_case}",
        rf"(?<!\w)(?:мне|меня|мной|to\s+me|for\s+me)\s*,\s*(?:как|as)\s+{_WORDS}{any_case}\s*,",
        rf"\bI\s+(?:go\s+by|answer\s+to|am\s+called|am\s+named)\s+{_WORDS}{any_case}",
        # the speaker as the object of its making: "the engineers at OpenAI trained me", "Google создал меня"
        rf"(?<![\w.-]){any_case}(?=(?:\s+[\w-]+){{0,3}}?\s+(?:trained|built|created|made|developed|designed|"
        rf"taught|programmed|fine-tuned)\s+me(?!\w)|(?:\s+[\w-]+){{0,3}}?\s+(?:созда|разработа|обучи|натренирова|"
        rf"выпусти|сдела)\w*\s+меня(?!\w))",
        # a label naming the author: "Qwen's answer:"
        rf"{_START}{any_case}(?:'s|’s)\s+(?:answer|response|reply|take|verdict)\s*[:—–]",
    ]


def _dash_line(ident: str) -> re.Pattern[str]:
    """An attribution dash opening a line: "— Qwen: …", "– Gemini (assistant):", "— Ваш GigaChat"."""
    any_case = rf"(?P<id>(?i:{ident}){_TAIL})"
    return re.compile(
        rf"^[ \t]*(?:[—–]|--)[ \t]*{_YOUR}{_WORDS}{any_case}"
        rf"(?=[ \t]*(?:\([^()\n]{{0,40}}\))?[ \t]*(?:[:,]|[.!]?[ \t]*$))",
        re.IGNORECASE | re.MULTILINE,
    )


def _in_a_list(text: str, position: int) -> bool:
    """Whether the line at ``position`` has a neighbouring non-empty line that is also a list item."""
    line_start = text.rfind("\n", 0, position) + 1
    line_end = text.find("\n", position)
    before = [line for line in text[max(0, line_start - _WINDOW) : line_start].splitlines() if line.strip()]
    after = (
        [line for line in text[line_end + 1 : line_end + 1 + _WINDOW].splitlines() if line.strip()]
        if (line_end >= 0)
        else []
    )
    neighbours = ([before[-1]] if before else []) + ([after[0]] if after else [])
    return any(_BULLET_LINE.match(line) for line in neighbours)


@dataclass(frozen=True, slots=True)
class Replacement:
    """One changed span of the original answer: ``original[start:end]`` became ``token``."""

    start: int
    end: int
    original: str
    token: str
    reason: str


@dataclass(frozen=True, slots=True)
class Anonymized:
    """What a judge sees, and every span of the original that was changed to get it (in order)."""

    text: str
    replacements: tuple[Replacement, ...]


_REASONING_OPEN = re.compile(r"<(think|thinking|reasoning|analysis)>", re.I)
_TEMPLATE_TOKENS = re.compile(
    r"<\|[^|>\n]{1,40}\|>|</?s>|\[/?INST\]|<(?:start|end)_of_turn>(?:user|model)?|<\|?eot_id\|?>", re.I
)
_HTML_COMMENT = re.compile(r"<!--(?:(?!-->)[^\n]|\n){0,400}?-->")
_GENERATOR_WORDS = re.compile(
    r"(?i)\b(?:generat\w*|model|llm|assistant|author|written|wrote|created|produced|answer\w*|response|reply|"
    r"output|engine|by|bot|ai)\b|(?:модел|ассистент|сгенерир|создан|подготов|автор|ответ|написан)"
)
_CYRILLIC = re.compile(r"[а-яё]", re.I)
_LATIN = re.compile(r"[a-z]", re.I)


def _reasoning_blocks(text: str) -> list[tuple[int, int]]:
    """``<think>…</think>`` blocks, and an unclosed one that opens the answer (linear: each tag is
    searched for at most once after it is known to be missing)."""
    spans: list[tuple[int, int]] = []
    unclosed: set[str] = set()
    position = 0
    while (opening := _REASONING_OPEN.search(text, position)) is not None:
        name = opening.group(1).lower()
        closing = None if name in unclosed else re.compile(rf"</{name}>", re.I).search(text, opening.end())
        if closing is not None:
            spans.append((opening.start(), closing.end()))
            position = closing.end()
            continue
        unclosed.add(name)
        if not text[: opening.start()].strip() and name != "analysis":
            spans.append((opening.start(), len(text)))
            break
        position = opening.end()
    return spans


def _disjoint(kept: list[tuple[int, int]], candidates: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """The ``candidates`` that overlap none of ``kept`` (sorted, disjoint spans)."""
    starts = [start for start, _ in kept]
    out: list[tuple[int, int]] = []
    for start, end in candidates:
        at = bisect.bisect_right(starts, start)  # kept[at - 1] starts at or before ``start``
        if (at > 0 and kept[at - 1][1] > start) or (at < len(kept) and kept[at][0] < end):
            continue
        out.append((start, end))
    return out


def neutral_token(text: str) -> str:
    """``[модель]`` in an answer written mostly in Cyrillic, ``[model]`` otherwise."""
    return TOKEN_RU if len(_CYRILLIC.findall(text)) > len(_LATIN.findall(text)) else TOKEN_EN


class Scrubber:
    """Finds and replaces self-identifications of any known family and of the run's own model names."""

    def __init__(self, model_names: Iterable[str] = ()) -> None:
        names = sorted({n.strip() for n in model_names if n and n.strip()}, key=len, reverse=True)
        self.model_names = tuple(names)
        extra = "|".join(rf"{re.escape(n)}(?![\w-])" for n in names)
        ident = f"(?:{_IDENT_CORE}|{extra})" if extra else _IDENT_CORE
        self._patterns = _patterns(ident)
        self._dash_line = _dash_line(ident)
        self._ident = re.compile(rf"(?<![\w.-])(?:{ident}){_TAIL}")
        self._loose_ident = re.compile(rf"(?<![\w.-])(?i:{ident}){_TAIL}")
        self._chain = re.compile(
            rf"(?:[\s,;:()«»\"“”'’–—-]|'s|’s)*(?:(?P<id>(?<![\w.-])(?:{ident}){_TAIL})|(?i:{_CHAIN_WORD}))"
        )
        long_names = [re.escape(n) for n in names if len(n) >= 3]
        # The whole token that holds a run model's name: "Qwen/qwen2.5-7b-instruct-GGUF:Q4_K_M" for
        # "qwen2.5-7b" (an owner before a slash, and any suffix joined by "-", ".", "_", ":" or "+").
        self._exact = (
            re.compile(
                rf"(?<![\w.-])(?:[\w.-]+/)?(?:{'|'.join(long_names)})(?:[-._:+]?[^\W_]+|_)*(?![\w-])", re.I
            )
            if long_names
            else None
        )

    def find(self, text: str) -> list[tuple[int, int, str]]:
        """``(start, end, reason)`` of every name to replace in ``text``, disjoint and in order: a family or
        maker in a self-identification, or one of the run's own model names anywhere."""
        view = DetectionText.of(text)
        found: list[tuple[int, int]] = []
        matches = [m for pattern in self._patterns for m in pattern.finditer(view.text)]
        matches += [m for m in self._dash_line.finditer(view.text) if not _in_a_list(view.text, m.start())]
        for match in matches:
            found.append((match.start("id"), match.end("id")))
            found.extend(self._chained(view.text, match.end("id")))
        self_ids = merge_spans([view.span(start, end) for start, end in found if end > start])
        names = (
            merge_spans(
                [view.span(*m.span()) for m in self._exact.finditer(view.text) if m.end() > m.start()]
            )
            if self._exact is not None
            else []
        )
        spans = [(start, end, "self-identification") for start, end in self_ids]
        spans += [(start, end, "run model name") for start, end in _disjoint(self_ids, names)]
        return sorted(spans)

    def _chained(self, text: str, position: int) -> list[tuple[int, int]]:
        """Further names in the same self-description: "Qwen, created by Alibaba Cloud", "Gemma от Google"."""
        spans: list[tuple[int, int]] = []
        limit = min(len(text), position + _WINDOW)
        while position < limit:
            match = self._chain.match(text, position, limit)
            if match is None or match.end() == position:
                break
            if match.group("id"):
                spans.append(match.span("id"))
            position = match.end()
        return spans

    def _names_the_generator(self, comment: str) -> bool:
        """Whether an HTML comment labels who wrote the answer: a self-identification, or a known
        name alone or next to a labelling word ("<!-- generated by Qwen -->", "<!-- model: x -->")."""
        inner = comment[4:-3]
        if self.find(inner):
            return True
        view = DetectionText.of(inner).text
        named = self._ident.search(view) or self._loose_ident.search(view)
        if named is None:
            return False
        rest = (view[: named.start()] + view[named.end() :]).strip(" \t\n-:=,.()")
        return not rest or _GENERATOR_WORDS.search(rest) is not None

    def _metadata(self, text: str) -> list[tuple[int, int]]:
        """Spans that are not part of the answer: reasoning blocks, chat-template tokens, and HTML
        comments that name the generator."""
        comments = [m.span() for m in _HTML_COMMENT.finditer(text) if self._names_the_generator(m.group())]
        return merge_spans(
            [*_reasoning_blocks(text), *(m.span() for m in _TEMPLATE_TOKENS.finditer(text)), *comments]
        )

    def anonymize(self, text: str | None) -> Anonymized:
        """The answer as a judge may see it, with every change listed."""
        if not text:
            return Anonymized("", ())
        metadata = self._metadata(text)
        changes = [(start, end, "", "metadata") for start, end in metadata]
        token = neutral_token(text)
        names = self.find(text)
        kept = _disjoint(metadata, [(start, end) for start, end, _ in names])
        changes += [(start, end, token, reason) for start, end, reason in names if (start, end) in set(kept)]
        hidden = _disjoint(merge_spans([*metadata, *kept]), hidden_spans(text))
        changes += [(start, end, "", "hidden characters") for start, end in hidden]
        changes.sort()
        replacements = tuple(Replacement(s, e, text[s:e], new, why) for s, e, new, why in changes)
        out: list[str] = []
        position = 0
        for r in replacements:
            out += [text[position : r.start], r.token]
            position = r.end
        out.append(text[position:])
        return Anonymized("".join(out), replacements)

    def scrub(self, text: str | None) -> str:
        """The answer as a judge may see it."""
        return self.anonymize(text).text


def opaque_id(model: str, seed: int) -> str:
    """A stable, meaningless id for ``model`` in a run with ``seed`` (``a-`` + 10 hex digits)."""
    digest = hashlib.blake2b(model.encode("utf-8"), digest_size=5, key=str(seed).encode("ascii")).hexdigest()
    return f"a-{digest}"


def opaque_ids(models: Sequence[str], seed: int) -> dict[str, str]:
    """``{model: opaque id}``; distinct models get distinct ids (a collision is re-drawn)."""
    mapping: dict[str, str] = {}
    used: set[str] = set()
    for model in models:
        ident, salt = opaque_id(model, seed), 0
        while ident in used:
            salt += 1
            ident = opaque_id(f"{model}#{salt}", seed)
        used.add(ident)
        mapping[model] = ident
    return mapping


def shuffled(items: Sequence[T], seed: int) -> list[T]:
    """A copy of ``items`` in a seeded random order (the same seed, the same order)."""
    out = list(items)
    random.Random(f"kubejury-judging-order:{seed}").shuffle(out)
    return out


def mapping_document(mapping: dict[str, str], seed: int, series: str) -> AnonymizationMap:
    """What is stored (separately from what judges see) to map ids back to models."""
    return AnonymizationMap(
        series=series, seed=seed, ids={ident: model for model, ident in sorted(mapping.items())}
    )
