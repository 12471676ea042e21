#!/usr/bin/env bash
# Builds the kubejury image from the repository's Dockerfile without Docker, because the tests that
# run real pods (issue 23) need the image users build, and this machine has no Docker engine and no
# registry. buildah builds the Dockerfile unchanged, with PYTHON_IMAGE set to the local base that
# scripts/image_base.sh makes with mmdebstrap (Debian bookworm and its python3.11).
#
# The result is an OCI archive, $KUBEJURY_CACHE/images/kubejury-<key>.tar, named
# ghcr.io/kubejury/kubejury:<appVersion of charts/kubejury/Chart.yaml> (`ctr -n k8s.io images import`
# and `podman load` take it). <key> hashes every input: the content of the files the build context
# holds (Dockerfile, .dockerignore, pyproject.toml, README.md, jobs/, operator/ as git sees them:
# tracked, changed or new, ignored files excepted), this script, the base recipe and the name.
# buildah's storage and layer cache live in $KUBEJURY_CACHE/containers/kubejury, so a rebuild after a
# source change reuses the dependency layers (the Dockerfile installs them from pyproject.toml alone);
# after each build the layers that build did not use are removed, so the storage holds one build.
# The PyPI index is needed while the dependency layers build; nothing else leaves the machine.
# Prints the archive path on its last line. Usage: scripts/build_image.sh [--print-path]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"
context=(Dockerfile .dockerignore pyproject.toml README.md jobs operator)

app_version="$(sed -n 's/^appVersion:[[:space:]]*"\{0,1\}\([^"[:space:]]*\)"\{0,1\}.*$/\1/p' \
  "$root/charts/kubejury/Chart.yaml")"
[[ -n "$app_version" ]] || { echo "no appVersion in charts/kubejury/Chart.yaml" >&2; exit 1; }
ref="ghcr.io/kubejury/kubejury:$app_version"
base_archive="$(bash "$root/scripts/image_base.sh" --print-path)"
base_tag="${base_archive##*/kubejury-base-}"
base_ref="localhost/kubejury-base:${base_tag%.tar}"

context_digests() { # "<blob hash> <path>" for every file of the build context that exists now
  local files
  files="$(cd "$root" && git ls-files --cached --others --exclude-standard -- "${context[@]}" |
    sort -u | while IFS= read -r file; do [[ -f "$file" ]] && echo "$file"; done)"
  paste -d ' ' <(cd "$root" && git hash-object --stdin-paths <<<"$files") - <<<"$files"
}
key="$({ context_digests; cat "${BASH_SOURCE[0]}"; echo "$base_ref $ref"; } | sha256sum | cut -c1-12)"
archive="$cache/images/kubejury-$key.tar"

if [[ "${1:-}" == "--print-path" ]]; then echo "$archive"; exit 0; fi
if [[ -f "$archive" ]]; then echo "$archive"; exit 0; fi

# The same storage as scripts/image_base.sh (podman reads it with the same two flags); nice runs
# the buildah program, not this function.
storage="$cache/containers/kubejury"
buildah() { nice -n 10 buildah --root "$storage/storage" --runroot "$storage/run" "$@"; }

forget_unused_layers() { # <build log>: drop the unnamed images (cached steps) the build did not use
  local used image name
  # bud prints "--> <short id>" for each step it committed and "--> Using cache <id>" for each it
  # reused; ids are compared by their first 11 hex digits, the short form.
  used="$(sed -n 's/^--> \(Using cache \)\{0,1\}\([0-9a-f]\{11\}\)[0-9a-f]*$/\2/p' "$1")"
  [[ -n "$used" ]] || return 0
  buildah images --all --noheading --no-trunc --format '{{.ID}} {{.Name}}' |
    while read -r image name; do
      image="${image#sha256:}"
      [[ "$name" == "<none>" ]] && ! grep -qx "${image:0:11}" <<<"$used" || continue
      buildah rmi "$image" >/dev/null 2>&1 || true
    done
}

forget_other_images() { # each source change leaves an archive behind: keep only the newest
  local old
  for old in "$cache"/images/kubejury-*.tar; do
    [[ -f "$old" && "$old" != "$archive" && "$old" != */kubejury-base-* ]] && rm -f "$old"
  done
  return 0
}

start=$(date +%s)
bash "$root/scripts/image_base.sh" >/dev/null
echo "Building $ref from the Dockerfile on $base_ref (cached in $archive)" >&2
# --layers: every step is cached in the storage, so only what a change touches runs again;
# --force-rm: a failed step leaves no working container behind.
# --network host: the RUN steps reach PyPI without a bridge or NAT being set up on this machine.
# --pull=never: the base is the local image; nothing is looked up in a registry.
# --volume: the RUN steps see this machine's CA bundle (this sandbox reaches PyPI through a
# TLS-intercepting egress with its own CA; Debian's pip reads that bundle). A bind mount is never
# part of a layer, so the image keeps the base's own CAs.
host_ca=/etc/ssl/certs/ca-certificates.crt
trust=()
[[ -f "$host_ca" ]] && trust=(--volume "$host_ca:$host_ca:ro")
mkdir -p "$storage"
buildah bud --layers --force-rm --network host --pull=never "${trust[@]}" \
  --build-arg "PYTHON_IMAGE=$base_ref" --tag "$ref" --file "$root/Dockerfile" "$root" 2>&1 |
  tee "$storage/last-build.log" >&2
built=$(date +%s)
# zstd, not gzip: every rebuild compresses the ~900 MB dependency layer again (buildah 1.28 ignores
# --disable-compression for oci-archive), and zstd does it in about half the time (13 s against
# 23-33 s here) into a smaller archive. containerd (since 1.5) and podman unpack zstd layers.
buildah push --quiet --compression-format zstd "$ref" "oci-archive:$archive.part:$ref" >&2
mv "$archive.part" "$archive"
forget_other_images
forget_unused_layers "$storage/last-build.log"
echo "Image built in $(( built - start )) s, archived in $(( $(date +%s) - built )) s:" \
  "$(du -h "$archive" | cut -f1) in $archive" >&2
echo "$archive"
