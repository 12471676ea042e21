"""Where a model's weights live in the model cache, agreed by the prefetch Job and the model server.

Why this module exists: the operator's CPU-only prefetch Job (``kubejury prefetch``) downloads a
model's weights into the model cache before the GPU server is created, and the server is then
started from that folder. Both sides must name the same folder without talking to each other, and
no spec field may choose it: the folder is ``<cache>/kubejury-weights/<key>``, the key a digest of
the model's source and the GGUF file selection only (:func:`model_dir`). A folder is complete only
once its marker file (:data:`COMPLETE_MARKER`) exists; the downloader writes that marker last, by
rename, so a partial download is never taken for a complete one. Pure: no I/O.
"""

from __future__ import annotations

import hashlib

from kubejury.runtimes import LLAMACPP, VLLM

WEIGHTS_FOLDER = "kubejury-weights"
COMPLETE_MARKER = ".kubejury-complete.json"
PARTIAL_FOLDER = ".partial"
GGUF_ENTRY = "model.gguf"  # a GGUF model's entry file (a link to the file, or first split, chosen)
PREFETCH_SCHEMES = ("hf://", "s3://")
PREFETCH_RUNTIMES = (VLLM.name, LLAMACPP.name)


def prefetchable(source: str, runtime: str) -> bool:
    """Whether weights of ``source`` served by ``runtime`` are downloaded ahead into the cache: Hugging
    Face repositories and S3 prefixes for vLLM and llama.cpp. Ollama pulls from its own registry,
    ``pvc://`` and ``file://`` weights are already on a volume."""
    return source.startswith(PREFETCH_SCHEMES) and runtime in PREFETCH_RUNTIMES


def gguf_selection(source: str, runtime: str, quantization: str | None) -> str:
    """The GGUF file a llama.cpp server wants of ``source``: the tag after ``:`` in
    ``hf://org/repo:Q4_K_M``, else the placement's quantization (upper case, as llama.cpp's
    ``--hf-repo repo:QUANT`` matches it); empty for vLLM (the whole repository)."""
    if runtime != LLAMACPP.name:
        return ""
    _, _, tag = source.removeprefix("hf://").partition(":")
    return (tag or quantization or "").upper()


def repository(source: str) -> str:
    """``org/repo`` of ``hf://org/repo[:TAG]``; the S3 URI itself for ``s3://``."""
    if source.startswith("hf://"):
        return source.removeprefix("hf://").partition(":")[0]
    return source


def cache_key(source: str, selection: str) -> str:
    """A folder name for (source, selection): 24 hex digits of their SHA-256."""
    return hashlib.sha256(f"{source}\n{selection}".encode()).hexdigest()[:24]


def model_dir(cache_root: str, source: str, selection: str) -> str:
    """The folder holding the weights of (source, selection) under the cache mounted at ``cache_root``."""
    return f"{cache_root.rstrip('/')}/{WEIGHTS_FOLDER}/{cache_key(source, selection)}"


def server_model_path(cache_root: str, source: str, runtime: str, quantization: str | None) -> str:
    """What the server loads: the folder (vLLM), or its GGUF entry file (llama.cpp)."""
    folder = model_dir(cache_root, source, gguf_selection(source, runtime, quantization))
    return f"{folder}/{GGUF_ENTRY}" if runtime == LLAMACPP.name else folder
