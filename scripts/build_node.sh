#!/usr/bin/env bash
# Builds, once per machine, what a real Kubernetes node needs beside the control plane that
# scripts/build_kube.sh builds (issue 23): kubelet and kube-proxy at the control plane's version,
# containerd 2 with its runc shim and ctr, the CNI plugins bridge/host-local/loopback/portmap,
# CoreDNS, kube-router (the NetworkPolicy enforcer) and two OCI image archives that cannot be pulled
# here: registry.k8s.io/pause and kubejury.local/coredns. Every source comes from the Go module
# proxy through the wrapper modules under cluster/node. Debian's runc, iptables, ipset and conntrack
# are used as they are; this script only checks that they are installed.
# Everything lands in $KUBEJURY_CACHE/node-<versions>-<recipe>/{bin,bin/cni,images}, keyed by the
# pinned versions and a hash of this script, the wrapper modules, the pause source and the image
# writer (<recipe>), so a version bump or a changed recipe builds afresh and a clean clone reuses it.
# Prints that directory on its last line. Usage: scripts/build_node.sh [--print-dir]
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"
node="$root/cluster/node"
pause_image="registry.k8s.io/pause:3.10.1"

version_of() { # module go.mod -> version without the leading v
  awk -v m="$1" '$1 == m && $2 ~ /^v/ { sub(/^v/, "", $2); print $2; exit }' "$2"
}
k8s="$(version_of k8s.io/kubernetes "$node/kube/go.mod")"
control_plane_k8s="$(version_of k8s.io/kubernetes "$root/cluster/kube/go.mod")"
if [[ "$k8s" != "$control_plane_k8s" ]]; then
  echo "cluster/node/kube pins k8s.io/kubernetes v$k8s but the control plane (cluster/kube) pins" \
    "v$control_plane_k8s: the kubelet must match the API server; pin the same version in both." >&2
  exit 1
fi
containerd="$(version_of github.com/containerd/containerd/v2 "$node/containerd/go.mod")"
cni="$(version_of github.com/containernetworking/plugins "$node/cni/go.mod")"
coredns="$(version_of github.com/coredns/coredns "$node/coredns/go.mod")"
kube_router="$(version_of github.com/cloudnativelabs/kube-router/v2 "$node/kube-router/go.mod")"
recipe="$(cat "${BASH_SOURCE[0]}" "$node"/*/go.mod "$node"/*/go.sum "$node"/pause/*.go \
  "$root/cluster/devcluster/oci_image.py" | sha256sum | cut -c1-8)"
dir="$cache/node-$k8s-containerd-$containerd-cni-$cni-coredns-$coredns-kube-router-$kube_router-$recipe"

if [[ "${1:-}" == "--print-dir" ]]; then echo "$dir"; exit 0; fi

# Runtime needs taken from Debian: runc runs the containers (the node's containerd names
# /usr/sbin/runc); kube-proxy and kube-router program iptables, ipset and conntrack.
missing=()
[[ -x /usr/sbin/runc ]] || missing+=("/usr/sbin/runc (Debian package runc)")
for tool in iptables ipset conntrack; do
  PATH="$PATH:/usr/sbin:/sbin" command -v "$tool" >/dev/null || missing+=("$tool (Debian package $tool)")
done
if (( ${#missing[@]} )); then
  echo "The real nodes need these programs, not found: ${missing[*]}. Install with apt-get install." >&2
  exit 1
fi

if [[ -f "$dir/.built" ]]; then echo "$dir"; exit 0; fi
export GOMODCACHE="${GOMODCACHE:-$cache/go/mod}"
export GOCACHE="${GOCACHE:-$cache/go/build}"
export GOFLAGS="-mod=mod -buildvcs=false"
export CGO_ENABLED=0
bin="$dir/bin"; images="$dir/images"
rm -rf "$dir"; mkdir -p "$bin/cni" "$images"
echo "Building the node components once (kubelet $k8s, containerd $containerd, CNI $cni, CoreDNS $coredns," \
  "kube-router $kube_router; cold: see docs/testing.md; cached in $dir)" >&2
start=$(date +%s)
go_build() { # module dir, then go build arguments; two jobs at most, the machine is shared
  local module="$1"; shift
  (cd "$module" && nice -n 10 go build -p 2 -trimpath "$@")
}
released() { # module dir, module path -> the release time the proxy records, for the build date
  (cd "$1" && go list -m -json "$2" | sed -n 's/^[[:space:]]*"Time": "\(.*\)",$/\1/p')
}
step() { echo "[$(( $(date +%s) - start )) s] $*" >&2; }

step "kubelet, kube-proxy"
# Stamped as Kubernetes' own build does (hack/lib/version.sh), exactly like scripts/build_kube.sh.
major="${k8s%%.*}"; minor="${k8s#*.}"; minor="${minor%%.*}"
date="$(released "$node/kube" k8s.io/kubernetes)"
stamp=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  stamp+=" -X $pkg.gitVersion=v$k8s -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
  stamp+=" -X $pkg.gitTreeState=clean -X $pkg.gitCommit= -X $pkg.buildDate=${date:-1970-01-01T00:00:00Z}"
done
go_build "$node/kube" -ldflags "-s -w$stamp" -o "$bin/" \
  k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kube-proxy

step "containerd, containerd-shim-runc-v2, ctr"
# The tags of containerd's own static release build; the shim leaves out gRPC as upstream's does.
stamp="-X github.com/containerd/containerd/v2/version.Version=v$containerd"
tags="urfave_cli_no_docs osusergo netgo static_build"
go_build "$node/containerd" -tags "$tags" -ldflags "-s -w $stamp" -o "$bin/" \
  github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/ctr
go_build "$node/containerd" -tags "$tags no_grpc" -ldflags "-s -w $stamp" -o "$bin/" \
  github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2

step "CNI plugins"
stamp="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v$cni"
go_build "$node/cni" -ldflags "-s -w $stamp" -o "$bin/cni/" \
  github.com/containernetworking/plugins/plugins/main/bridge \
  github.com/containernetworking/plugins/plugins/ipam/host-local \
  github.com/containernetworking/plugins/plugins/main/loopback \
  github.com/containernetworking/plugins/plugins/meta/portmap

step "kube-router"
date="$(released "$node/kube-router" github.com/cloudnativelabs/kube-router/v2)"
stamp="-X github.com/cloudnativelabs/kube-router/v2/pkg/version.Version=v$kube_router"
stamp+=" -X github.com/cloudnativelabs/kube-router/v2/pkg/version.BuildDate=$date"
go_build "$node/kube-router" -ldflags "-s -w $stamp" -o "$bin/" \
  github.com/cloudnativelabs/kube-router/v2/cmd/kube-router

step "CoreDNS, pause"
go_build "$node/coredns" -ldflags "-s -w -X github.com/coredns/coredns/coremain.GitCommit=v$coredns" \
  -o "$bin/coredns" github.com/coredns/coredns
go_build "$node/pause" -ldflags "-s -w" -o "$bin/pause" .

step "images"
oci_image() { PYTHONPATH="$root/cluster" python3 -m devcluster.oci_image "$@" >&2; }
oci_image --name "$pause_image" --entrypoint /pause --user 65535:65535 \
  --file "$bin/pause:/pause:0755" "$images/pause-${pause_image##*:}.tar"
# Like upstream's CoreDNS image: /coredns as a non-root user, the Corefile from a ConfigMap mounted
# at /etc/coredns, and /coredns given cap_net_bind_service=+ep (setcap) so that it can bind port 53
# when the pod permits NET_BIND_SERVICE: runc starts a non-root process with no effective
# capabilities, whatever the container's spec adds.
oci_image --name "kubejury.local/coredns:$coredns" --entrypoint /coredns \
  --arg=-conf --arg=/etc/coredns/Corefile --user 65532:65532 --dir /etc/coredns \
  --file "$bin/coredns:/coredns:0755:cap_net_bind_service" "$images/coredns-$coredns.tar"

echo "Built in $(( $(date +%s) - start )) s" >&2
touch "$dir/.built"
echo "$dir"
