#!/usr/bin/env bash
# Makes the local stand-in for the Dockerfile's default base (python:3.11-slim-bookworm), because
# there is no Docker and no registry here: Debian bookworm (mmdebstrap, minbase variant) with
# Debian's python3.11 and exactly what the Dockerfile's stages use from a base — `python` on PATH
# (python-is-python3), `python -m venv` with ensurepip (python3-venv), groupadd/useradd (passwd) —
# plus ca-certificates, netbase and tzdata, which the default base installs for its Python too.
# docs/testing.md says how it differs from the default base.
#
# The result is an OCI archive, $KUBEJURY_CACHE/images/kubejury-base-bookworm-python3.11-<recipe>.tar,
# keyed by a hash of this script (the package list and every option live here), so a changed recipe
# builds afresh and a clean clone reuses it. It is also loaded into the buildah storage of
# scripts/build_image.sh ($KUBEJURY_CACHE/containers/kubejury) as localhost/kubejury-base:<same tag>.
# Prints the archive path on its last line. Usage: scripts/image_base.sh [--print-path]
# Needs root, mmdebstrap, buildah and Debian's mirror (deb.debian.org) while it builds.
set -euo pipefail

cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"
recipe="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-8)"
tag="bookworm-python3.11-$recipe"
archive="$cache/images/kubejury-base-$tag.tar"
ref="localhost/kubejury-base:$tag"

if [[ "${1:-}" == "--print-path" ]]; then echo "$archive"; exit 0; fi
# buildah's storage lives in the cache, not in /var/lib/containers: one of its own, which
# build_image.sh prunes (the same flags there).
buildah() {
  command buildah --root "$cache/containers/kubejury/storage" --runroot "$cache/containers/kubejury/run" "$@"
}
mkdir -p "$cache/images"

# The packages on top of minbase (Essential: yes, plus apt). passwd is Priority: required but not
# Essential, so minbase lacks it; python3-venv brings ensurepip's pip and setuptools wheels.
packages=(python3 python3-venv python-is-python3 passwd ca-certificates netbase tzdata)
# Documentation and translations are left out as Debian's own slim images leave them out (the
# copyright files stay); the rules persist in /etc/dpkg/dpkg.cfg.d for later package installs.
dpkg_options=(
  'path-exclude=/usr/share/doc/*' 'path-include=/usr/share/doc/*/copyright'
  'path-exclude=/usr/share/man/*' 'path-exclude=/usr/share/info/*' 'path-exclude=/usr/share/groff/*'
  'path-exclude=/usr/share/lintian/*' 'path-exclude=/usr/share/locale/*'
)
sources=(
  "deb http://deb.debian.org/debian bookworm main"
  "deb http://deb.debian.org/debian bookworm-updates main"
  "deb http://deb.debian.org/debian-security bookworm-security main"
)

build_rootfs() { # output tar -> a bookworm root file system as a tar archive
  local options=() option
  for option in "${dpkg_options[@]}"; do options+=("--dpkgopt=$option"); done
  # The merged-usr hook makes /bin, /lib, /sbin symlinks into /usr before the essential packages,
  # as debootstrap (and so Debian's official images) does; without it init-system-helpers pulls in
  # the usrmerge package and with it the whole of perl (46 MB).
  nice -n 10 mmdebstrap --mode=root --variant=minbase --format=tar --quiet \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr \
    --include="$(IFS=,; echo "${packages[*]}")" "${options[@]}" \
    bookworm "$1" "${sources[@]}"
}

commit_base() { # rootfs tar -> the image $ref in the storage
  local container
  container="$(buildah from --pull=never scratch)"
  buildah add --quiet "$container" "$1" / >/dev/null
  # mmdebstrap's tar carries device nodes in /dev; an image leaves /dev empty (the runtime fills it).
  find "$(buildah mount "$container")/dev" -mindepth 1 -delete
  buildah umount "$container" >/dev/null
  # LANG as the default base sets it; its PATH puts /usr/local/bin first, which Debian's also does.
  buildah config --env LANG=C.UTF-8 \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --cmd python3 --created-by "scripts/image_base.sh ($tag)" "$container"
  buildah commit --quiet --rm "$container" "$ref" >/dev/null
}

forget_other_bases() { # a changed recipe leaves its predecessor behind: drop its archive and name
  local old old_tag
  for old in "$cache"/images/kubejury-base-*.tar; do
    [[ -f "$old" && "$old" != "$archive" ]] || continue
    old_tag="${old##*/kubejury-base-}"
    rm -f "$old"
    buildah rmi "localhost/kubejury-base:${old_tag%.tar}" >/dev/null 2>&1 || true
  done
}

if [[ ! -f "$archive" ]]; then
  echo "Building the local base image $ref once (cached in $archive)" >&2
  start=$(date +%s)
  work="$(mktemp -d "$cache/images/.base-XXXXXX")"
  trap 'rm -rf "$work"' EXIT
  build_rootfs "$work/rootfs.tar"
  commit_base "$work/rootfs.tar"
  buildah push --quiet "$ref" "oci-archive:$work/base.tar:$ref"
  mv "$work/base.tar" "$archive"
  forget_other_bases
  echo "Base built in $(( $(date +%s) - start )) s: $(du -h "$archive" | cut -f1) archive" >&2
elif ! buildah inspect --type image "$ref" >/dev/null 2>&1; then
  echo "Loading $archive into the storage as $ref" >&2
  buildah tag "$(buildah pull --quiet "oci-archive:$archive")" "$ref"
fi
echo "$archive"
