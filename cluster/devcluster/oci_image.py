"""Writes one-layer OCI image archives for the real dev-cluster nodes, without Docker or a registry.

The real nodes need a pod sandbox image (``registry.k8s.io/pause``) and a CoreDNS image, and nothing
here can pull them. ``scripts/build_node.sh`` builds the static programs and packs each into an
oci-layout tar with this module; ``ctr -n k8s.io images import`` loads it under the name carried by
the ``io.containerd.image.name`` annotation. Only the standard library is used, so the build
script can run it with the system ``python3``::

    PYTHONPATH=cluster python3 -m devcluster.oci_image --name registry.k8s.io/pause:3.10.1 \\
        --entrypoint /pause --file "$bin/pause:/pause" pause.tar

Archives are deterministic: every timestamp is zero, owners are root, entries are sorted and no
creation time is recorded, so the same inputs give the same bytes and the same manifest digest.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import json
import os
import platform
import struct
import sys
import tarfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

IMAGE_NAME_ANNOTATION = "io.containerd.image.name"
REF_NAME_ANNOTATION = "org.opencontainers.image.ref.name"
INDEX_MEDIA_TYPE = "application/vnd.oci.image.index.v1+json"
MANIFEST_MEDIA_TYPE = "application/vnd.oci.image.manifest.v1+json"
CONFIG_MEDIA_TYPE = "application/vnd.oci.image.config.v1+json"
LAYER_MEDIA_TYPE = "application/vnd.oci.image.layer.v1.tar+gzip"
DIRECTORY_MODE = 0o755
CAPABILITY_XATTR = "SCHILY.xattr.security.capability"

# Linux capability numbers (linux/capability.h) of the ones an image file may plausibly carry.
CAPABILITY_NUMBERS = {
    "CAP_CHOWN": 0,
    "CAP_DAC_OVERRIDE": 1,
    "CAP_FOWNER": 3,
    "CAP_KILL": 5,
    "CAP_SETGID": 6,
    "CAP_SETUID": 7,
    "CAP_NET_BIND_SERVICE": 10,
    "CAP_NET_ADMIN": 12,
    "CAP_NET_RAW": 13,
    "CAP_SYS_ADMIN": 21,
}
_VFS_CAP_REVISION_2 = 0x02000000
_VFS_CAP_FLAGS_EFFECTIVE = 0x000001

_GO_ARCHITECTURES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


@dataclass(frozen=True)
class ImageFile:
    """A file of the host copied into the image at an absolute path, with the given permission bits.

    ``capabilities`` (e.g. ``CAP_NET_BIND_SERVICE``) become the file's ``security.capability``
    xattr, permitted and effective, as ``setcap cap_net_bind_service=+ep`` would set them: what
    lets a non-root program such as CoreDNS bind port 53 when its container's spec permits the
    capability (upstream's CoreDNS image does the same).
    """

    source: Path
    destination: PurePosixPath
    mode: int
    capabilities: tuple[str, ...] = ()


@dataclass(frozen=True)
class ImageConfig:
    """How a container of the image starts: the OCI image config's ``config`` section and platform."""

    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    user: str = ""
    env: tuple[str, ...] = ()
    workdir: str = ""
    architecture: str = ""

    def platform_architecture(self) -> str:
        """The architecture named in the image: the given one, else this machine's (Go's spelling)."""
        if self.architecture:
            return self.architecture
        machine = platform.machine().lower()
        return _GO_ARCHITECTURES.get(machine, machine)


@dataclass(frozen=True)
class Blob:
    """A content-addressed blob of the layout and the descriptor that points at it."""

    media_type: str
    content: bytes

    @property
    def digest(self) -> str:
        return "sha256:" + hashlib.sha256(self.content).hexdigest()

    def descriptor(self, **extra: Any) -> dict[str, Any]:
        return {"mediaType": self.media_type, "digest": self.digest, "size": len(self.content), **extra}


class ImageError(ValueError):
    """The inputs cannot make an image: a relative or duplicate destination, a missing source."""


def write_image(
    archive: Path,
    name: str,
    files: Sequence[ImageFile],
    config: ImageConfig,
    directories: Sequence[PurePosixPath] = (),
) -> str:
    """Write the image ``name`` as an oci-layout tar at ``archive``; return its manifest digest."""
    layer_tar = build_layer(files, directories)
    layer = Blob(LAYER_MEDIA_TYPE, gzip_deterministically(layer_tar))
    image_config = Blob(CONFIG_MEDIA_TYPE, canonical_json(config_document(config, layer_tar)))
    manifest = Blob(MANIFEST_MEDIA_TYPE, canonical_json(manifest_document(image_config, layer)))
    index = index_document(manifest, name, config.platform_architecture())
    write_layout_archive(archive, index, (layer, image_config, manifest))
    return manifest.digest


def build_layer(files: Sequence[ImageFile], directories: Sequence[PurePosixPath] = ()) -> bytes:
    """The uncompressed layer tar: the files, the extra directories and every parent directory."""
    check_destinations(files, directories)
    wanted_directories = set(directories)
    for path in [*directories, *(image_file.destination for image_file in files)]:
        wanted_directories.update(parents_of(path))
    entries: list[tuple[str, ImageFile | None]] = [(relative(path), None) for path in wanted_directories]
    entries += [(relative(image_file.destination), image_file) for image_file in files]
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as layer:
        for member_name, entry_file in sorted(entries, key=lambda entry: entry[0]):
            if entry_file is None:
                layer.addfile(directory_member(member_name))
            else:
                add_file(layer, member_name, entry_file)
    return buffer.getvalue()


def check_destinations(files: Sequence[ImageFile], directories: Sequence[PurePosixPath]) -> None:
    destinations = [image_file.destination for image_file in files]
    for path in [*destinations, *directories]:
        if not path.is_absolute() or path == PurePosixPath("/") or ".." in path.parts:
            raise ImageError(f"image path {path} must be absolute, below / and without '..'")
    duplicates = {path for path in destinations if destinations.count(path) > 1}
    if duplicates:
        raise ImageError(f"image paths given more than once: {sorted(map(str, duplicates))}")
    implied_directories = set(directories)
    for destination in destinations:
        implied_directories |= parents_of(destination)
    clashes = set(destinations) & implied_directories
    if clashes:
        raise ImageError(f"image paths both files and directories: {sorted(map(str, clashes))}")


def parents_of(path: PurePosixPath) -> set[PurePosixPath]:
    return {parent for parent in path.parents if parent != PurePosixPath("/")}


def relative(path: PurePosixPath) -> str:
    return str(path.relative_to("/"))


def directory_member(member_name: str) -> tarfile.TarInfo:
    member = owned_by_root(tarfile.TarInfo(member_name))
    member.type = tarfile.DIRTYPE
    member.mode = DIRECTORY_MODE
    return member


def add_file(layer: tarfile.TarFile, member_name: str, image_file: ImageFile) -> None:
    if not image_file.source.is_file():
        raise ImageError(f"{image_file.source} is not a file")
    content = image_file.source.read_bytes()
    member = owned_by_root(tarfile.TarInfo(member_name))
    member.mode = image_file.mode
    member.size = len(content)
    if image_file.capabilities:
        xattr = file_capability_xattr(image_file.capabilities)
        # PAX values are text to tarfile; surrogateescape hands the raw bytes through unchanged.
        member.pax_headers = {CAPABILITY_XATTR: xattr.decode("utf-8", "surrogateescape")}
    layer.addfile(member, io.BytesIO(content))


def file_capability_xattr(capabilities: Sequence[str]) -> bytes:
    """The ``security.capability`` value (struct vfs_cap_data, revision 2) granting them ``+ep``."""
    permitted = 0
    for name in capabilities:
        number = CAPABILITY_NUMBERS.get(name.upper())
        if number is None:
            raise ImageError(f"unknown capability {name!r}; known: {sorted(CAPABILITY_NUMBERS)}")
        permitted |= 1 << number
    low, high = permitted & 0xFFFFFFFF, permitted >> 32
    inheritable = 0
    magic = _VFS_CAP_REVISION_2 | _VFS_CAP_FLAGS_EFFECTIVE
    return struct.pack("<5I", magic, low, inheritable, high, inheritable)


def owned_by_root(member: tarfile.TarInfo) -> tarfile.TarInfo:
    member.uid = member.gid = 0
    member.uname = member.gname = ""
    member.mtime = 0
    return member


def gzip_deterministically(content: bytes) -> bytes:
    """Gzip with no name and a zero timestamp in the header, so equal input gives equal output."""
    return gzip.compress(content, compresslevel=9, mtime=0)


def canonical_json(document: dict[str, Any]) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


def config_document(config: ImageConfig, layer_tar: bytes) -> dict[str, Any]:
    """The OCI image config; the diff ID is the digest of the uncompressed layer."""
    runtime: dict[str, Any] = {"Entrypoint": list(config.entrypoint)}
    if config.cmd:
        runtime["Cmd"] = list(config.cmd)
    if config.user:
        runtime["User"] = config.user
    if config.env:
        runtime["Env"] = list(config.env)
    if config.workdir:
        runtime["WorkingDir"] = config.workdir
    return {
        "architecture": config.platform_architecture(),
        "os": "linux",
        "config": runtime,
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer_tar).hexdigest()]},
    }


def manifest_document(image_config: Blob, layer: Blob) -> dict[str, Any]:
    return {
        "schemaVersion": 2,
        "mediaType": MANIFEST_MEDIA_TYPE,
        "config": image_config.descriptor(),
        "layers": [layer.descriptor()],
    }


def index_document(manifest: Blob, name: str, architecture: str) -> dict[str, Any]:
    """The layout's index: one manifest, named for containerd and by its tag for OCI tools."""
    annotations = {IMAGE_NAME_ANNOTATION: name, REF_NAME_ANNOTATION: tag_of(name)}
    descriptor = manifest.descriptor(
        annotations=annotations, platform={"architecture": architecture, "os": "linux"}
    )
    return {"schemaVersion": 2, "mediaType": INDEX_MEDIA_TYPE, "manifests": [descriptor]}


def tag_of(name: str) -> str:
    """The tag of a reference (``registry.k8s.io/pause:3.10.1`` -> ``3.10.1``); ``latest`` if none."""
    last_component = name.rsplit("/", 1)[-1]
    if ":" not in last_component:
        return "latest"
    return last_component.rsplit(":", 1)[1]


def write_layout_archive(archive: Path, index: dict[str, Any], blobs: Iterable[Blob]) -> None:
    """Write the oci-layout tar next to ``archive`` and rename it into place, so no reader sees half."""
    entries = {
        "oci-layout": canonical_json({"imageLayoutVersion": "1.0.0"}),
        "index.json": canonical_json(index),
    }
    for blob in blobs:
        entries["blobs/sha256/" + blob.digest.removeprefix("sha256:")] = blob.content
    directories = ["blobs", "blobs/sha256"]
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, mode="w", format=tarfile.PAX_FORMAT) as layout:
        for directory in directories:
            layout.addfile(directory_member(directory))
        for member_name in sorted(entries):
            member = owned_by_root(tarfile.TarInfo(member_name))
            member.mode = 0o644
            member.size = len(entries[member_name])
            layout.addfile(member, io.BytesIO(entries[member_name]))
    os.replace(partial, archive)


def parse_file_argument(argument: str) -> ImageFile:
    """``SOURCE:DEST[:MODE[:CAP,...]]`` -> an ImageFile.

    MODE is octal; without it, 0755 for an executable source and 0644 otherwise. CAPs are
    capability names (``cap_net_bind_service``) the file is given, permitted and effective.
    """
    parts = argument.split(":")
    if len(parts) not in (2, 3, 4):
        raise argparse.ArgumentTypeError(f"--file wants SOURCE:DEST[:MODE[:CAP,...]], got {argument!r}")
    source = Path(parts[0])
    if len(parts) >= 3 and parts[2]:
        mode = int(parts[2], 8)
    else:
        mode = 0o755 if source.exists() and os.access(source, os.X_OK) else 0o644
    capabilities = tuple(name.upper() for name in parts[3].split(",") if name) if len(parts) == 4 else ()
    return ImageFile(source, PurePosixPath(parts[1]), mode, capabilities)


def argument_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python3 -m devcluster.oci_image",
        description="Write a one-layer OCI image as an oci-layout tar (ctr images import).",
    )
    parser.add_argument("archive", type=Path, help="the tar to write")
    parser.add_argument(
        "--name", required=True, help="the image reference, e.g. registry.k8s.io/pause:3.10.1"
    )
    parser.add_argument("--entrypoint", required=True, action="append", help="repeat for each word")
    parser.add_argument(
        "--arg", dest="cmd", action="append", default=[], help="a default argument (Cmd); repeat"
    )
    parser.add_argument("--user", default="", help="uid[:gid] the container runs as")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE; repeat")
    parser.add_argument("--workdir", default="")
    parser.add_argument("--architecture", default="", help="default: this machine's")
    parser.add_argument("--dir", dest="directories", action="append", default=[], type=PurePosixPath)
    parser.add_argument("--file", dest="files", action="append", default=[], type=parse_file_argument)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Write the archive; print its path and the manifest digest on one line."""
    arguments = argument_parser().parse_args(argv)
    config = ImageConfig(
        entrypoint=tuple(arguments.entrypoint),
        cmd=tuple(arguments.cmd),
        user=arguments.user,
        env=tuple(arguments.env),
        workdir=arguments.workdir,
        architecture=arguments.architecture,
    )
    try:
        digest = write_image(
            arguments.archive, arguments.name, arguments.files, config, arguments.directories
        )
    except ImageError as error:
        print(f"oci_image: {error}", file=sys.stderr)
        return 1
    print(f"{arguments.archive} {digest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
