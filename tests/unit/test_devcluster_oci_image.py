"""The image archives the real nodes import (pause, CoreDNS): a valid oci-layout, content-addressed,
named for containerd, reproducible, and carrying the files with the modes asked for."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import struct
import tarfile
from pathlib import Path, PurePosixPath
from typing import Any

import pytest

from devcluster.oci_image import (
    IMAGE_NAME_ANNOTATION,
    ImageConfig,
    ImageError,
    ImageFile,
    main,
    write_image,
)

COREDNS = ImageConfig(
    entrypoint=("/coredns",),
    cmd=("-conf", "/etc/coredns/Corefile"),
    user="65532:65532",
    env=("PATH=/",),
    workdir="/",
    architecture="amd64",
)


def program(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / "src" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def archive_members(archive: Path) -> dict[str, bytes]:
    with tarfile.open(archive) as layout:
        return {
            member.name: extracted.read()
            for member in layout.getmembers()
            if member.isfile() and (extracted := layout.extractfile(member)) is not None
        }


def blob(members: dict[str, bytes], descriptor: dict[str, Any]) -> bytes:
    algorithm, hex_digest = descriptor["digest"].split(":")
    return members[f"blobs/{algorithm}/{hex_digest}"]


def coredns_image(tmp_path: Path, archive_name: str = "coredns.tar") -> tuple[Path, str]:
    binary = program(tmp_path, "coredns", b"\x7fELF pretend coredns")
    archive = tmp_path / archive_name
    digest = write_image(
        archive,
        "kubejury.local/coredns:1.15.0",
        [ImageFile(binary, PurePosixPath("/coredns"), 0o755)],
        COREDNS,
        directories=[PurePosixPath("/etc/coredns")],
    )
    return archive, digest


def layer_members(archive: Path) -> dict[str, tarfile.TarInfo]:
    members = archive_members(archive)
    manifest = json.loads(blob(members, json.loads(members["index.json"])["manifests"][0]))
    layer = gzip.decompress(blob(members, manifest["layers"][0]))
    with tarfile.open(fileobj=io.BytesIO(layer)) as layer_tar:
        return {member.name: member for member in layer_tar.getmembers()}


def test_the_archive_is_an_oci_layout_with_one_manifest_one_config_and_one_layer(tmp_path: Path) -> None:
    archive, digest = coredns_image(tmp_path)
    members = archive_members(archive)
    assert json.loads(members["oci-layout"]) == {"imageLayoutVersion": "1.0.0"}
    index = json.loads(members["index.json"])
    assert index["schemaVersion"] == 2
    [manifest_descriptor] = index["manifests"]
    assert manifest_descriptor["digest"] == digest
    assert manifest_descriptor["mediaType"] == "application/vnd.oci.image.manifest.v1+json"
    manifest = json.loads(blob(members, manifest_descriptor))
    assert manifest["config"]["mediaType"] == "application/vnd.oci.image.config.v1+json"
    assert [layer["mediaType"] for layer in manifest["layers"]] == [
        "application/vnd.oci.image.layer.v1.tar+gzip"
    ]
    assert len(members) == 2 + 3  # oci-layout, index.json and the three blobs, nothing else


def test_every_blob_is_named_and_described_by_the_digest_and_size_of_its_content(tmp_path: Path) -> None:
    archive, _ = coredns_image(tmp_path)
    members = archive_members(archive)
    for name, content in members.items():
        if name.startswith("blobs/"):
            assert name == "blobs/sha256/" + hashlib.sha256(content).hexdigest()
    manifest_descriptor = json.loads(members["index.json"])["manifests"][0]
    manifest = json.loads(blob(members, manifest_descriptor))
    for descriptor in [manifest_descriptor, manifest["config"], *manifest["layers"]]:
        assert len(blob(members, descriptor)) == descriptor["size"]


def test_the_configs_diff_id_is_the_digest_of_the_uncompressed_layer(tmp_path: Path) -> None:
    archive, _ = coredns_image(tmp_path)
    members = archive_members(archive)
    manifest = json.loads(blob(members, json.loads(members["index.json"])["manifests"][0]))
    config = json.loads(blob(members, manifest["config"]))
    uncompressed = gzip.decompress(blob(members, manifest["layers"][0]))
    assert config["rootfs"] == {
        "type": "layers",
        "diff_ids": ["sha256:" + hashlib.sha256(uncompressed).hexdigest()],
    }


def test_containerd_finds_the_image_name_and_oci_tools_the_tag_in_the_index(tmp_path: Path) -> None:
    archive, _ = coredns_image(tmp_path)
    [descriptor] = json.loads(archive_members(archive)["index.json"])["manifests"]
    assert descriptor["annotations"] == {
        IMAGE_NAME_ANNOTATION: "kubejury.local/coredns:1.15.0",
        "org.opencontainers.image.ref.name": "1.15.0",
    }
    assert descriptor["platform"] == {"architecture": "amd64", "os": "linux"}


def test_the_config_says_how_the_container_starts(tmp_path: Path) -> None:
    archive, _ = coredns_image(tmp_path)
    members = archive_members(archive)
    manifest = json.loads(blob(members, json.loads(members["index.json"])["manifests"][0]))
    config = json.loads(blob(members, manifest["config"]))
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    assert config["config"] == {
        "Entrypoint": ["/coredns"],
        "Cmd": ["-conf", "/etc/coredns/Corefile"],
        "User": "65532:65532",
        "Env": ["PATH=/"],
        "WorkingDir": "/",
    }


def test_the_layer_holds_the_files_with_their_modes_and_every_parent_directory(tmp_path: Path) -> None:
    tool = program(tmp_path, "tool", b"#!/bin/sh\necho tool\n")
    settings = program(tmp_path, "settings", b"key = value\n")
    archive = tmp_path / "tools.tar"
    write_image(
        archive,
        "kubejury.local/tools:1",
        [
            ImageFile(tool, PurePosixPath("/usr/local/bin/tool"), 0o750),
            ImageFile(settings, PurePosixPath("/etc/tool/settings"), 0o640),
        ],
        ImageConfig(entrypoint=("/usr/local/bin/tool",)),
        directories=[PurePosixPath("/var/cache/tool")],
    )
    members = layer_members(archive)
    assert sorted(members) == [
        "etc",
        "etc/tool",
        "etc/tool/settings",
        "usr",
        "usr/local",
        "usr/local/bin",
        "usr/local/bin/tool",
        "var",
        "var/cache",
        "var/cache/tool",
    ]
    assert (members["usr/local/bin/tool"].mode, members["etc/tool/settings"].mode) == (0o750, 0o640)
    assert all(
        members[name].isdir() and members[name].mode == 0o755
        for name in ["etc", "usr/local", "var/cache/tool"]
    )
    assert all((member.uid, member.gid, member.mtime) == (0, 0, 0) for member in members.values())


def test_the_layer_carries_each_files_content_unchanged(tmp_path: Path) -> None:
    archive, _ = coredns_image(tmp_path)
    members = archive_members(archive)
    manifest = json.loads(blob(members, json.loads(members["index.json"])["manifests"][0]))
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob(members, manifest["layers"][0])))) as layer:
        extracted = layer.extractfile("coredns")
        assert extracted is not None
        assert extracted.read() == b"\x7fELF pretend coredns"


def test_the_same_inputs_give_the_same_bytes_whenever_and_wherever_they_are_written(tmp_path: Path) -> None:
    first, first_digest = coredns_image(tmp_path, "first.tar")
    (tmp_path / "src" / "coredns").touch()  # a newer mtime on the source must not matter
    second, second_digest = coredns_image(tmp_path, "second.tar")
    assert first_digest == second_digest
    assert first.read_bytes() == second.read_bytes()


def test_a_different_program_or_config_gives_a_different_digest(tmp_path: Path) -> None:
    _, original = coredns_image(tmp_path, "original.tar")
    binary = program(tmp_path, "coredns", b"\x7fELF pretend coredns, rebuilt")
    rebuilt = write_image(
        tmp_path / "rebuilt.tar",
        "kubejury.local/coredns:1.15.0",
        [ImageFile(binary, PurePosixPath("/coredns"), 0o755)],
        COREDNS,
        directories=[PurePosixPath("/etc/coredns")],
    )
    as_root = write_image(
        tmp_path / "as-root.tar",
        "kubejury.local/coredns:1.15.0",
        [ImageFile(binary, PurePosixPath("/coredns"), 0o755)],
        ImageConfig(entrypoint=COREDNS.entrypoint, cmd=COREDNS.cmd, architecture="amd64"),
        directories=[PurePosixPath("/etc/coredns")],
    )
    assert len({original, rebuilt, as_root}) == 3


def test_a_file_given_a_capability_carries_it_permitted_and_effective_as_setcap_would(tmp_path: Path) -> None:
    binary = program(tmp_path, "coredns", b"\x7fELF pretend coredns")
    archive = tmp_path / "coredns.tar"
    image_file = ImageFile(binary, PurePosixPath("/coredns"), 0o755, ("CAP_NET_BIND_SERVICE",))
    write_image(archive, "kubejury.local/coredns:1.15.0", [image_file], COREDNS)
    xattr = layer_members(archive)["coredns"].pax_headers["SCHILY.xattr.security.capability"]
    magic, permitted_low, inheritable_low, permitted_high, inheritable_high = struct.unpack(
        "<5I", xattr.encode("utf-8", "surrogateescape")
    )
    assert magic >> 24 == 2  # struct vfs_cap_data, revision 2
    assert magic & 1 == 1  # the effective flag: the capability is raised when the program starts
    net_bind_service = 10  # linux/capability.h
    assert (permitted_low, permitted_high) == (1 << net_bind_service, 0)
    assert (inheritable_low, inheritable_high) == (0, 0)


def test_a_file_without_capabilities_carries_no_capability_xattr(tmp_path: Path) -> None:
    archive, _ = coredns_image(tmp_path)
    assert layer_members(archive)["coredns"].pax_headers == {}


def test_an_unknown_capability_is_refused(tmp_path: Path) -> None:
    binary = program(tmp_path, "coredns", b"x")
    image_file = ImageFile(binary, PurePosixPath("/coredns"), 0o755, ("CAP_BIND_ANYTHING",))
    with pytest.raises(ImageError, match="unknown capability"):
        write_image(tmp_path / "x.tar", "x:1", [image_file], COREDNS)


def test_the_command_line_takes_a_files_mode_and_capabilities_after_its_destination(tmp_path: Path) -> None:
    binary = program(tmp_path, "coredns", b"x")
    archive = tmp_path / "coredns.tar"
    argv = [
        "--name",
        "c:1",
        "--entrypoint",
        "/coredns",
        "--file",
        f"{binary}:/coredns:0750:cap_net_bind_service",
    ]
    assert main([*argv, str(archive)]) == 0
    member = layer_members(archive)["coredns"]
    assert member.mode == 0o750
    assert "SCHILY.xattr.security.capability" in member.pax_headers


@pytest.mark.parametrize("destination", ["coredns", "/", "/bin/../coredns"])
def test_a_destination_outside_the_image_root_is_refused(tmp_path: Path, destination: str) -> None:
    binary = program(tmp_path, "coredns", b"x")
    with pytest.raises(ImageError, match="absolute"):
        write_image(
            tmp_path / "x.tar", "x:1", [ImageFile(binary, PurePosixPath(destination), 0o755)], COREDNS
        )


def test_a_path_that_is_both_a_file_and_a_directory_is_refused(tmp_path: Path) -> None:
    binary = program(tmp_path, "coredns", b"x")
    files = [
        ImageFile(binary, PurePosixPath("/bin"), 0o755),
        ImageFile(binary, PurePosixPath("/bin/coredns"), 0o755),
    ]
    with pytest.raises(ImageError, match="both files and directories"):
        write_image(tmp_path / "x.tar", "x:1", files, COREDNS)
    assert not (tmp_path / "x.tar").exists()


def test_the_command_line_writes_the_image_and_prints_its_digest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pause = program(tmp_path, "pause", b"\x7fELF pretend pause")
    pause.chmod(0o755)
    archive = tmp_path / "images" / "pause.tar"
    argv = ["--name", "registry.k8s.io/pause:3.10.1", "--entrypoint", "/pause", "--user", "65535:65535"]
    assert main([*argv, "--file", f"{pause}:/pause", str(archive)]) == 0
    printed_archive, printed_digest = capsys.readouterr().out.split()
    members = archive_members(archive)
    [descriptor] = json.loads(members["index.json"])["manifests"]
    assert (printed_archive, printed_digest) == (str(archive), descriptor["digest"])
    assert descriptor["annotations"][IMAGE_NAME_ANNOTATION] == "registry.k8s.io/pause:3.10.1"
    assert layer_members(archive)["pause"].mode == 0o755  # an executable source stays executable


def test_the_command_line_reports_a_missing_source_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    archive = tmp_path / "pause.tar"
    status = main(
        ["--name", "p:1", "--entrypoint", "/pause", "--file", f"{tmp_path / 'absent'}:/pause", str(archive)]
    )
    assert status == 1
    assert "is not a file" in capsys.readouterr().err
    assert not archive.exists()
