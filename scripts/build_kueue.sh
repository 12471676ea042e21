#!/usr/bin/env bash
# Builds, once per machine, the real Kueue that the dev cluster installs (issue 25): EvalRuns are
# admitted by Kueue quotas, and the tests of that must run against Kueue itself, not a stand-in.
# The `kueue` manager binary comes from the Go module proxy (sigs.k8s.io/kueue, `go install
# pkg@version`: its go.mod has no replace directives), and its release manifests are rendered from
# the same module with the project's own kubectl (`kubectl kustomize config/default`, what Kueue's
# `make artifacts` does), so nothing at test time needs the Go module cache.
# Everything lands in $KUBEJURY_CACHE/kueue-v<version>-<recipe>/{bin/kueue,manifests/kueue.yaml},
# keyed by the version and a hash of this script (<recipe>), so a version bump or a changed recipe
# builds afresh and a clean clone reuses it.
# Prints that directory on its last line. Usage: scripts/build_kueue.sh [--print-dir]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"
version="0.17.0"
module="sigs.k8s.io/kueue"
recipe="$(sha256sum "${BASH_SOURCE[0]}" | cut -c1-8)"
dir="$cache/kueue-v$version-$recipe"

if [[ "${1:-}" == "--print-dir" ]]; then echo "$dir"; exit 0; fi
if [[ -f "$dir/.built" ]]; then echo "$dir"; exit 0; fi

export GOMODCACHE="${GOMODCACHE:-$cache/go/mod}"
export GOCACHE="${GOCACHE:-$cache/go/build}"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
# The manifests are rendered by the dev cluster's kubectl (its embedded kustomize): build it first.
kube_bin="$(bash "$root/scripts/build_kube.sh" | tail -n 1)"
rm -rf "$dir"; mkdir -p "$dir/bin" "$dir/manifests"
echo "Building Kueue v$version once (cold: see docs/testing.md; cached in $dir)" >&2
start=$(date +%s)
step() { echo "[$(( $(date +%s) - start )) s] $*" >&2; }

step "download $module@v$version"
# Outside any module (cd /): the module's own go.mod alone decides its dependency graph.
info="$(cd / && go mod download -json "$module@v$version")"
src="$(sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p' <<<"$info")"
released="$(sed -n 's/.*"Time":"\([^"]*\)".*/\1/p' "$(sed -n 's/^[[:space:]]*"Info": "\(.*\)",$/\1/p' <<<"$info")")"

step "kueue manager"
# Stamped as Kueue's own Makefile does (LD_FLAGS: GitVersion, GitCommit, BuildDate); the module zip
# carries no commit, so GitCommit stays empty and BuildDate is the release time the proxy records.
stamp="-X $module/pkg/version.GitVersion=v$version -X $module/pkg/version.GitCommit="
stamp+=" -X $module/pkg/version.BuildDate=${released:-1970-01-01T00:00:00Z}"
(cd / && GOBIN="$dir/bin" nice -n 10 go install -p 2 -trimpath -ldflags "-s -w $stamp" \
  "$module/cmd/kueue@v$version")

step "release manifests"
"$kube_bin/kubectl" kustomize "$src/config/default" >"$dir/manifests/kueue.yaml"

echo "Built in $(( $(date +%s) - start )) s" >&2
touch "$dir/.built"
echo "$dir"
