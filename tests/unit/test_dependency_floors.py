"""Dependency floors that documented behaviour needs: the lowest version pyproject.toml allows must have it.

A floor below the feature means a fresh install on an older pin (a distribution package, a
constraints file) silently loses the behaviour the docs promise.
"""

from __future__ import annotations

import inspect
import re
import tomllib
from pathlib import Path

import kopf

PYPROJECT = Path(__file__).resolve().parents[2] / "pyproject.toml"


def _floor(package: str) -> tuple[int, ...]:
    dependencies = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]["dependencies"]
    for requirement in dependencies:
        match = re.fullmatch(rf"{package}>=([0-9.]+)", requirement.replace(" ", ""))
        if match:
            return tuple(int(part) for part in match[1].split("."))
    raise AssertionError(f"{package} has no >= floor in pyproject.toml")


def test_kopf_floor_reloads_renewed_webhook_certificates() -> None:
    # docs/chart.md: cert-manager renewals are picked up by the running operator. kopf restarts its
    # webhook server when the certificate files change from 1.41.0 on (WebhookServer's
    # file_check_interval; 1.40.1 has neither the parameter nor the file watch).
    assert "file_check_interval" in inspect.signature(kopf.WebhookServer).parameters
    assert _floor("kopf") >= (1, 41)
