#!/usr/bin/env bash
# Builds the dev cluster's binaries once per machine: kube-apiserver, kube-controller-manager,
# kube-scheduler, kubectl and etcd from the wrapper module cluster/kube, and kwok from cluster/kwok.
# They land in $KUBEJURY_CACHE/kube-<k8s>-etcd-<etcd>-kwok-<kwok>-<recipe>/bin, keyed by the versions
# pinned in those go.mod files and a hash of this script and the go.mod/go.sum files (<recipe>), so a
# version bump or a change of how we build builds afresh, and a clean clone reuses the cache.
# Prints the bin directory on its last line. Usage: scripts/build_kube.sh [--print-dir]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"

version_of() { # module go.mod -> version without the leading v
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { sub(/^v/, "", $2); print $2; exit }' "$2"
}
k8s="$(version_of k8s.io/kubernetes "$root/cluster/kube/go.mod")"
etcd="$(version_of go.etcd.io/etcd/server/v3 "$root/cluster/kube/go.mod")"
kwok="$(version_of sigs.k8s.io/kwok "$root/cluster/kwok/go.mod")"
recipe="$(cat "${BASH_SOURCE[0]}" "$root"/cluster/kube/go.{mod,sum} "$root"/cluster/kwok/go.{mod,sum} |
  sha256sum | cut -c1-8)"
bin="$cache/kube-$k8s-etcd-$etcd-kwok-$kwok-$recipe/bin"

if [[ "${1:-}" == "--print-dir" ]]; then echo "$bin"; exit 0; fi
export GOMODCACHE="${GOMODCACHE:-$cache/go/mod}"
export GOCACHE="${GOCACHE:-$cache/go/build}"
export GOFLAGS="-mod=mod -buildvcs=false"

# KWOK's own default Stage manifests (node-initialize, heartbeat-with-lease, pod-ready, pod-delete)
# ship inside its module; the harness loads them from here and adjusts them (docs/testing.md).
stages="$(dirname "$bin")/kwok-stages"
if [[ ! -f "$stages/.copied" ]]; then
  src="$(cd "$root/cluster/kwok" && go mod download -json "sigs.k8s.io/kwok@v$kwok" |
    sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
  mkdir -p "$stages"
  for f in node/fast/node-initialize node/heartbeat-with-lease/node-heartbeat-with-lease \
           pod/fast/pod-ready pod/fast/pod-delete; do
    install -m 0644 "$src/kustomize/stage/$f.yaml" "$stages/"
  done
  touch "$stages/.copied"
fi

if [[ -f "$bin/.built" ]]; then echo "$bin"; exit 0; fi
export CGO_ENABLED=0
mkdir -p "$bin"
echo "Building Kubernetes $k8s, etcd $etcd and KWOK $kwok once (cold: see docs/testing.md; cached in $bin)" >&2
start=$(date +%s)
# Stamp the release version as Kubernetes' own build does (hack/lib/version.sh): without it the
# binaries say v0.0.0-master and e.g. a chart's kubeVersion constraint refuses the cluster.
released="$(cd "$root/cluster/kube" && go list -m -json k8s.io/kubernetes |
  sed -n 's/^[[:space:]]*"Time": "\(.*\)",$/\1/p')"
major="${k8s%%.*}"; minor="${k8s#*.}"; minor="${minor%%.*}"
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=v$k8s -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit= -X $pkg.buildDate=${released:-1970-01-01T00:00:00Z}"
done
flags=(-trimpath -ldflags "-s -w$stamp")
(cd "$root/cluster/kube" && go build "${flags[@]}" -o "$bin/" \
  k8s.io/kubernetes/cmd/kube-apiserver \
  k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler \
  k8s.io/kubernetes/cmd/kubectl \
  ./cmd/etcd)
(cd "$root/cluster/kwok" && go build "${flags[@]}" -o "$bin/" sigs.k8s.io/kwok/cmd/kwok)
echo "Built in $(( $(date +%s) - start )) s" >&2
touch "$bin/.built"
echo "$bin"
