#!/usr/bin/env bash
# Builds the llama.cpp server image that the operator's pin names (LLAMACPP_CPU in
# operator/kubejury_operator/images.py), without Docker and without a registry, so that real pods
# run the real llama-server with exactly the manifests users get.
#   - llama-server is compiled from the llama.cpp that the llama-cpp-python sdist on PyPI vendors
#     ($LLAMA_VERSION, the Makefile's pin; CPU only, portable $LLAMA_CMAKE_ARGS, ggml and llama
#     linked statically). Cached in $KUBEJURY_CACHE/llama-server/<version>-<build>-<hash>/,
#     keyed by the version, the cmake flags and this script's compile recipe only, so a change of
#     the base does not recompile. Cold: 22 min measured on 2 cores shared at load 8-13 (nice, -j2).
#   - the root filesystem is a Debian bookworm minbase made by mmdebstrap with
#     cluster/images/llama-server/packages; cached in $KUBEJURY_CACHE/images/ (cold: 1-3 min).
#   - buildah (storage in $KUBEJURY_CACHE/containers/llama-server) assembles cluster/images/llama-server/
#     Containerfile and writes an OCI archive named with the pin's reference, importable with
#     `ctr -n k8s.io images import`: $KUBEJURY_CACHE/images/llama-server-<hash>.tar, keyed by this
#     script, the version, the cmake flags and the base recipe (Containerfile, packages and
#     vendored-llama-cpp.tsv in cluster/images/llama-server/).
# Progress goes to stderr; the last stdout line is the archive's path.
# Usage: scripts/build_llama_image.sh [--print-path]
# Environment: KUBEJURY_CACHE, LLAMA_VERSION, LLAMA_CMAKE_ARGS, DEBIAN_MIRROR, PYTHON (runs pip to
# download the sdist; default .venv/bin/python, else python3).
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
recipe_dir="$root/cluster/images/llama-server"
cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"
llama_version="${LLAMA_VERSION:-0.3.36}"
cmake_args="${LLAMA_CMAKE_ARGS:--DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON}"
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

log() { echo "build_llama_image: $*" >&2; }
die() { log "error: $*"; exit 1; }
hash_of() { sha256sum | cut -c1-12; }
elapsed() { local s=$(($(date +%s) - $1)); printf '%dm%02ds' $((s / 60)) $((s % 60)); }

pinned_reference() { # the reference of LLAMACPP_CPU in images.py: the one the manifests render
  awk '/^LLAMACPP_CPU = PinnedImage\(/ { inside = 1 }
       inside && /reference=/ { sub(/.*reference="/, ""); sub(/".*/, ""); print; exit }' \
    "$root/operator/kubejury_operator/images.py"
}

vendored_row() { # <version> -> "<commit> <build>" from vendored-llama-cpp.tsv
  awk -F'\t' -v v="$1" '$1 == v { print $2, $3; exit }' "$recipe_dir/vendored-llama-cpp.tsv"
}

image_ref="$(pinned_reference)"
[[ -n "$image_ref" ]] || die "no LLAMACPP_CPU reference in operator/kubejury_operator/images.py"
read -r llama_commit llama_build <<<"$(vendored_row "$llama_version")"
[[ -n "$llama_build" ]] ||
  die "llama-cpp-python $llama_version is not in $recipe_dir/vendored-llama-cpp.tsv: add its llama.cpp commit and build"

# Static ggml/llama (the binary needs only glibc, libstdc++, libgomp and libssl), the server only,
# no web UI: ggml's image builds the UI with npm, and the prebuilt-UI option downloads it at build time.
static_args="-DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
-DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_APP=OFF \
-DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=ON -DGGML_OPENMP=ON"

fetch_sdist() { # -> the unpacked sdist directory (downloaded once per version)
  local dir="$cache/src/llama-cpp-python-$llama_version"
  if [[ ! -f "$dir/.unpacked" ]]; then
    local python="${PYTHON:-python3}" dl="$cache/src/.download-$$"
    [[ -n "${PYTHON:-}" || ! -x "$root/.venv/bin/python" ]] || python="$root/.venv/bin/python"
    log "downloading the llama-cpp-python $llama_version sdist from PyPI"
    rm -rf "$dl" "$dir" && mkdir -p "$dl"
    "$python" -m pip download -q --no-deps --no-binary :all: -d "$dl" "llama-cpp-python==$llama_version" >&2
    tar -xzf "$dl/llama_cpp_python-$llama_version.tar.gz" -C "$dl"
    mv "$dl/llama_cpp_python-$llama_version" "$dir" && rm -rf "$dl"
    touch "$dir/.unpacked"
  fi
  echo "$dir"
}

check_vendored_commit() { # the CHANGELOG's last "update llama.cpp" line names the vendored commit
  local short
  short="$(sed -n 's/.*update llama\.cpp to ggml-org\/llama\.cpp@\([0-9a-f]*\).*/\1/p' "$1/CHANGELOG.md" | head -n1)"
  [[ -n "$short" && "$llama_commit" == "$short"* ]] ||
    die "llama-cpp-python $llama_version vendors llama.cpp@$short, vendored-llama-cpp.tsv says $llama_commit"
}

compile_llama_server() { # <sdist dir> <output dir>: llama-server alone, nice and -j2
  local src="$1/vendor/llama.cpp" out="$2" build="$2.build"
  rm -rf "$build" && mkdir -p "$build"
  # shellcheck disable=SC2086 # the flag strings are lists of cmake arguments
  nice -n 10 cmake -S "$src" -B "$build" $static_args $cmake_args \
    -DLLAMA_BUILD_NUMBER="$llama_build" -DLLAMA_BUILD_COMMIT="${llama_commit:0:9}" >&2
  nice -n 10 cmake --build "$build" --target llama-server -j 2 >&2
  mkdir -p "$out"
  install -m 0755 "$build/bin/llama-server" "$out/llama-server"
  rm -rf "$build"
}

binary_dir() {
  local key
  key="$(printf '%s\n' "$llama_version" "$llama_commit" "$static_args" "$cmake_args" \
    "$(declare -f compile_llama_server)" | hash_of)"
  echo "$cache/llama-server/$llama_version-b$llama_build-$key"
}

ensure_binary() { # -> the directory holding the compiled llama-server
  local dir src start
  dir="$(binary_dir)"
  if [[ ! -f "$dir/.built" ]]; then
    src="$(fetch_sdist)"
    check_vendored_commit "$src"
    log "compiling llama-server (llama.cpp b$llama_build, ${llama_commit:0:9}) once (cold: 22 min on 2 busy cores); cached in $dir"
    start=$(date +%s)
    compile_llama_server "$src" "$dir"
    touch "$dir/.built"
    log "compiled llama-server in $(elapsed "$start")"
  fi
  echo "$dir"
}

make_rootfs() { # <output tar>: Debian bookworm minbase plus the listed packages
  local packages
  packages="$(grep -v '^[[:space:]]*\(#\|$\)' "$recipe_dir/packages" | paste -sd, -)"
  # shellcheck disable=SC2016 # "$1" is the hook's argument (the root), expanded by mmdebstrap
  nice -n 10 mmdebstrap --format=tar --variant=minbase --include="$packages" --components=main \
    --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
    --dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
    --customize-hook='rm -rf "$1"/var/cache/apt/* "$1"/var/lib/apt/lists/*' \
    bookworm "$1" "$mirror" >&2
}

ensure_rootfs() { # -> the cached root filesystem tar
  local tar start
  tar="$cache/images/llama-server-rootfs-$(printf '%s\n' "$mirror" "$(cat "$recipe_dir/packages")" \
    "$(declare -f make_rootfs)" | hash_of).tar"
  if [[ ! -f "$tar" ]]; then
    log "making the Debian bookworm root filesystem with mmdebstrap; cached in $tar"
    start=$(date +%s)
    mkdir -p "$(dirname "$tar")"
    make_rootfs "$tar.partial"
    mv "$tar.partial" "$tar"
    log "made the root filesystem in $(elapsed "$start")"
  fi
  echo "$tar"
}

buildah_() { # storage of its own: another build may use $cache/containers/storage with overlay
  buildah --root "$cache/containers/llama-server/storage" --runroot "$cache/containers/llama-server/run" \
    --storage-driver vfs "$@"
}

assemble_image() { # <binary dir> <rootfs tar> <output archive>
  local context="$3.context" tag="localhost/kubejury-llama-server:build-$$"
  rm -rf "$context" && mkdir -p "$context"
  cp "$recipe_dir/Containerfile" "$context/Containerfile"
  ln "$2" "$context/rootfs.tar" 2>/dev/null || cp "$2" "$context/rootfs.tar"
  cp "$1/llama-server" "$context/llama-server"
  # One layer, every timestamp 0: the same inputs give the same image digest.
  buildah_ bud --quiet --timestamp 0 --layers=false -f "$context/Containerfile" -t "$tag" "$context" >&2
  # The archive's org.opencontainers.image.ref.name is the full reference: `ctr images import`
  # (containerd 1.6 and 2.4) and `podman load` name the image with it.
  buildah_ push --quiet "$tag" "oci-archive:$3:$image_ref" >&2
  buildah_ rmi "$tag" >/dev/null
  rm -rf "$context"
}

base_recipe=("$recipe_dir/Containerfile" "$recipe_dir/packages" "$recipe_dir/vendored-llama-cpp.tsv")
image_key="$({ cat "${BASH_SOURCE[0]}" "${base_recipe[@]}"
  printf '%s\n' "$llama_version" "$cmake_args" "$mirror" "$image_ref"; } | hash_of)"
archive="$cache/images/llama-server-$image_key.tar"
if [[ "${1:-}" == "--print-path" ]]; then echo "$archive"; exit 0; fi
if [[ -f "$archive" ]]; then log "cached: $image_ref"; echo "$archive"; exit 0; fi

total=$(date +%s)
bin="$(ensure_binary)"
rootfs="$(ensure_rootfs)"
log "assembling $image_ref with buildah"
assemble_image "$bin" "$rootfs" "$archive.partial"
mv "$archive.partial" "$archive"
log "built $image_ref ($(du -h "$archive" | cut -f1)) in $(elapsed "$total")"
echo "$archive"
