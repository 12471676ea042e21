"""Reading the dev cluster's audit log while the API server writes it: complete events only."""

from __future__ import annotations

import json
from pathlib import Path

from devcluster import Cluster


def test_a_line_still_being_written_is_left_for_the_next_read(tmp_path: Path) -> None:
    cluster = Cluster(
        state_dir=tmp_path, bin_dir=tmp_path, nodes_file=tmp_path, api_url="https://127.0.0.1:1"
    )
    assert cluster.audit_events() == []
    first = {"verb": "create", "responseStatus": {"code": 201}}
    second = {"verb": "list", "responseStatus": {"code": 403}}
    cluster.audit_log.write_text(json.dumps(first) + "\n" + json.dumps(second) + "\n" + '{"verb": "ge')
    assert cluster.audit_events() == [first, second]
