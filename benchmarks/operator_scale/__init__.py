"""The operator scale benchmark (issue 13, part 2): ``make bench-operator``.

Why this package exists: the operator's cost on a real control plane — its CPU and memory, the API
requests it makes while runs are active and once they are finished, how fast a finished Job shows
in an EvalRun's status, how long placing and creating the model servers takes, and what it costs
etcd and the API server — measured for the operator's watch-fed design at several numbers of
runs, on one cluster, with the same workload. The list-per-tick design it replaced (issue 13) was
removed in issue 22; its recorded figures are carried from results file to results file and shown
beside the new ones as the historical baseline (:func:`.report.baseline`).

Everything is real (etcd, kube-apiserver with RBAC and the audit log, the controllers, the
scheduler, the chart installed by helm, the operator authenticated as the chart's ServiceAccount)
except what :mod:`.fast_kubelet` and KWOK simulate: nodes, model-server pods (KWOK makes them
Ready) and the Job pods (the fast kubelet writes each stage's real progress records and marks the
pod Succeeded without running inference). See docs/benchmarks.md.

Modules: :mod:`.nodemix` (the 500-node NodeList), :mod:`.workload` (the EvalRuns),
:mod:`.fast_kubelet` (the simulated Job pods), :mod:`.kube` (a small JSON client with watches),
:mod:`.measure` (pure arithmetic: audit log, percentiles, delays), :mod:`.procstat` (CPU and
RSS from /proc), :mod:`.report` (the results files), :mod:`.bench` (one round per
scale) and ``__main__`` (the command line).
"""
