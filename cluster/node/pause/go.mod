// The pod sandbox's PID 1 for the real dev-cluster nodes, packed into the registry.k8s.io/pause
// image by scripts/build_node.sh (no registry can be reached here to pull the upstream one).
module github.com/kubejury/kubejury/cluster/node/pause

go 1.26.0
