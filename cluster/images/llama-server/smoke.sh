#!/usr/bin/env bash
# Runs the llama.cpp server image that scripts/build_llama_image.sh built as the operator would run
# it, without a cluster, so a wrong entrypoint, a refused flag or a write to the root filesystem
# shows in seconds rather than as a pod in CrashLoopBackOff: the container spec (args, env, uid)
# is rendered by the operator's own model_deployment for a pvc:// GGUF; podman runs it with the
# pod's security (uid/gid 1000, read-only root, no capabilities, no new privileges, default
# seccomp) and the volumes a kubelet would mount (the model read-only, the cache and /tmp
# writable), in a network namespace of its own that has only loopback. It checks /health, the
# served alias in /v1/models, one /v1/chat/completions answer, the uid, that / is read-only, and
# that SIGTERM stops the server within the pod's grace period.
# Podman always writes rlimits into the OCI spec; runc sets them on the container's first process
# after it has become uid 1000, which needs CAP_SYS_RESOURCE (not in this machine's bounding set),
# so podman runs runc through a wrapper that drops them: containerd 2's CRI spec has none either. Podman's storage lives in a temporary directory and is
# removed afterwards.
# Usage: cluster/images/llama-server/smoke.sh [archive] [gguf]
#   archive: default, the path scripts/build_llama_image.sh --print-path names
#   gguf:    default, $KUBEJURY_CACHE/models/gemma-3-270m-q4_k_m.gguf
# Prints "ok" on its last line.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
cache="${KUBEJURY_CACHE:-$HOME/.cache/kubejury}"
archive="${1:-$("$root/scripts/build_llama_image.sh" --print-path)}"
gguf="${2:-$cache/models/gemma-3-270m-q4_k_m.gguf}"
python="${VENV_PYTHON:-$root/.venv/bin/python}" # imports the operator to render the spec
alias_name="smoke-model"
netns="kj-llama-smoke-$$"
container="kj-llama-smoke-$$"

log() { echo "smoke: $*" >&2; }
die() { log "FAILED: $*"; exit 1; }
[[ -f "$archive" ]] || die "no image archive at $archive (run scripts/build_llama_image.sh)"
[[ -f "$gguf" ]] || die "no GGUF model at $gguf"

podman_() {
  podman --root "$work/storage" --runroot "$work/run" --storage-driver vfs \
    --cgroup-manager cgroupfs --events-backend file "$@"
}
cleanup() {
  podman_ rm -f -t 0 "$container" >/dev/null 2>&1 || true
  ip netns delete "$netns" 2>/dev/null || true
  rm -rf "$work"
}
work="$(mktemp -d /tmp/kj-llama-smoke.XXXXXX)"
trap cleanup EXIT

runtime_without_rlimits() { # -> a runc wrapper that removes the rlimits of `create` and `exec`
  cat >"$work/runc" <<'SH'
#!/bin/sh
prev=""
for arg in "$@"; do
  case "$prev" in
    --bundle | -b) spec="$arg/config.json" path=.process.rlimits ;;
    --process | -p) spec="$arg" path=.rlimits ;;
    *) spec="" ;;
  esac
  if [ -n "$spec" ]; then jq "del($path)" "$spec" >"$spec.new" && mv "$spec.new" "$spec"; fi
  prev="$arg"
done
exec runc "$@"
SH
  chmod 0755 "$work/runc"
  echo "$work/runc"
}

render_container() { # the operator's server container for a pvc:// GGUF, as JSON
  "$python" - "$(basename "$gguf")" "$alias_name" <<'PY'
import json
import sys

from kubejury.records.placement import Placement
from kubejury_operator import manifests, settings, vocabulary

gguf, alias = sys.argv[1], sys.argv[2]
endpoint = vocabulary.Endpoint(
    key="m-smoke", name="smoke", source=f"pvc://models/{gguf}", served_model=alias, runtime="llamacpp",
    placement=Placement(runtime="llamacpp", quantization="q4_k_m", tensor_parallel_size=0, node_selector={}),
)
run = vocabulary.RunRef(name="smoke", namespace="smoke", uid="00000000-0000-0000-0000-000000000000")
pod = manifests.model_deployment(run, endpoint, 1, settings.WorkloadSettings())["spec"]["template"]["spec"]
print(json.dumps({"pod": pod["securityContext"], "container": pod["containers"][0]}))
PY
}

spec="$(render_container)"
image="$(jq -r .container.image <<<"$spec")"
uid="$(jq -r .pod.runAsUser <<<"$spec")"
gid="$(jq -r .pod.runAsGroup <<<"$spec")"
port="$(jq -r '.container.ports[0].containerPort' <<<"$spec")"
mapfile -t args < <(jq -r '.container.args[]' <<<"$spec")
mapfile -t env_flags < <(jq -r '.container.env[] | select(.value != null) | "--env=\(.name)=\(.value)"' <<<"$spec")
mount_of() { jq -r --arg n "$1" '.container.volumeMounts[] | select(.name == $n) | .mountPath' <<<"$spec"; }
[[ "$(jq -r .container.securityContext.readOnlyRootFilesystem <<<"$spec")" == true ]] ||
  die "the operator no longer renders a read-only root filesystem; update this script"
log "image $image, uid $uid:$gid, args: ${args[*]}"

log "loading $archive"
podman_ load -q -i "$archive" >&2
podman_ image exists "$image" || die "the archive holds no image named $image"

# What the kubelet would give the pod: the claim read-only, emptyDirs owned by the fsGroup.
mkdir -p "$work/src" "$work/cache" "$work/tmp"
ln "$gguf" "$work/src/$(basename "$gguf")" 2>/dev/null || cp "$gguf" "$work/src/"
chown "$uid:$gid" "$work/cache" "$work/tmp"
chmod 0755 "$work"
ip netns add "$netns"
ip -n "$netns" link set lo up

log "starting llama-server"
podman_ run -d --name "$container" --network "ns:/run/netns/$netns" \
  --user "$uid:$gid" --read-only --read-only-tmpfs=false --cap-drop ALL \
  --security-opt no-new-privileges --runtime "$(runtime_without_rlimits)" \
  -v "$work/src:$(mount_of model-source):ro" -v "$work/cache:$(mount_of model-cache)" \
  -v "$work/tmp:$(mount_of tmp)" "${env_flags[@]}" "$image" "${args[@]}" >/dev/null

in_netns() { ip netns exec "$netns" "$@"; }
for _ in $(seq 1 120); do
  in_netns curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
  [[ "$(podman_ inspect -f '{{.State.Running}}' "$container")" == true ]] || {
    podman_ logs "$container" >&2
    die "llama-server exited: $(podman_ inspect -f '{{.State.ExitCode}}' "$container")"
  }
  sleep 1
done
health="$(in_netns curl -sf "http://127.0.0.1:$port/health")" || { podman_ logs "$container" >&2; die "/health"; }
log "/health: $health"

models="$(in_netns curl -sf "http://127.0.0.1:$port/v1/models")"
jq -e --arg a "$alias_name" '[.data[].id] | index($a) != null' <<<"$models" >/dev/null ||
  die "/v1/models does not serve the alias $alias_name: $models"
log "/v1/models serves $alias_name"

request="$(jq -n --arg a "$alias_name" \
  '{model: $a, max_tokens: 32, temperature: 0, messages: [{role: "user", content: "Name the capital of France."}]}')"
answer="$(in_netns curl -sf -H 'Content-Type: application/json' -d "$request" \
  "http://127.0.0.1:$port/v1/chat/completions")" || die "/v1/chat/completions"
content="$(jq -r '.choices[0].message.content' <<<"$answer")"
[[ -n "$content" && "$content" != null ]] || die "empty chat answer: $answer"
log "/v1/chat/completions (model $(jq -r .model <<<"$answer")): $content"

inside_uid="$(podman_ exec "$container" id -u)"
[[ "$inside_uid" == "$uid" ]] || die "runs as uid $inside_uid, not $uid"
write_error="$(podman_ exec "$container" sh -c ': > /written' 2>&1)" && die "the root filesystem is writable"
[[ "$write_error" == *"Read-only file system"* ]] || die "writing to / failed otherwise: $write_error"
log "uid $inside_uid; writing to / fails"
# A kubelet stops a pod with SIGTERM and kills it when the grace period (30 s) is over.
stop_start=$(date +%s)
podman_ stop -t 30 "$container" >/dev/null
stopped_in=$(($(date +%s) - stop_start))
exit_code="$(podman_ inspect -f '{{.State.ExitCode}}' "$container")"
((stopped_in < 30)) || die "llama-server ignored SIGTERM for the whole grace period"
log "SIGTERM: exited with $exit_code after ${stopped_in}s"
log "server log:"
podman_ logs "$container" 2>&1 | grep -iE 'build|system_info|chat template|listening|model loaded' >&2 || true
echo ok
