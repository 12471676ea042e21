"""kubejury operator: kopf handlers (thin), a pure reconcile planner, GPU placement, manifest
builders, one Kubernetes gateway and Prometheus metrics. The Jobs it creates run the engine
(package ``kubejury``) from the same image."""

from __future__ import annotations
