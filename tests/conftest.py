"""Suite-wide fixtures: the dev cluster's ``kube_cluster`` (devcluster.pytest_fixtures, docs/testing.md)."""

from __future__ import annotations

pytest_plugins = ("devcluster.pytest_fixtures",)
