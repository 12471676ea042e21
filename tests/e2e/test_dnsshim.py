"""The harness's cluster DNS (dnsshim/sitecustomize.py) in a child process, as Job pods get it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

SHIM = Path(__file__).resolve().parent / "dnsshim"
PROBE = """
import socket, sys
for name in sys.argv[1:]:
    try:
        print(name, socket.getaddrinfo(name, 8000, proto=socket.IPPROTO_TCP)[0][4][0])
    except socket.gaierror:
        print(name, "NXDOMAIN")
"""


def resolve(hosts: dict[str, str], tmp_path: Path, *names: str) -> dict[str, str]:
    table = tmp_path / "hosts.json"
    table.write_text(json.dumps(hosts))
    env = {**os.environ, "PYTHONPATH": str(SHIM), "KUBEJURY_E2E_HOSTS": str(table)}
    done = subprocess.run(
        [sys.executable, "-c", PROBE, *names], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return dict(line.split() for line in done.stdout.splitlines())


def test_service_names_resolve_to_their_stub_address_in_every_form(tmp_path: Path) -> None:
    hosts = {"kj-run-m-alpha.evals": "127.77.0.1"}
    found = resolve(
        hosts,
        tmp_path,
        "kj-run-m-alpha.evals.svc",
        "kj-run-m-alpha.evals.svc.cluster.local",
        "kj-run-m-alpha.evals",
    )
    assert set(found.values()) == {"127.77.0.1"}


def test_an_unknown_service_is_nxdomain_and_other_names_use_the_real_resolver(tmp_path: Path) -> None:
    found = resolve({}, tmp_path, "nope.evals.svc", "localhost", "127.0.0.1")
    assert found["nope.evals.svc"] == "NXDOMAIN"
    assert found["localhost"] in ("127.0.0.1", "::1")
    assert found["127.0.0.1"] == "127.0.0.1"


def test_uvloop_lookups_go_through_the_shim_too(tmp_path: Path) -> None:
    """The stages run on uvloop, whose getaddrinfo does not call socket.getaddrinfo."""
    table = tmp_path / "hosts.json"
    table.write_text(json.dumps({"kj-run-m-alpha.evals": "127.77.0.1"}))
    probe = (
        "import asyncio, uvloop\n"
        "async def main():\n"
        "    found = await asyncio.get_running_loop().getaddrinfo('kj-run-m-alpha.evals.svc', 8000)\n"
        "    print(found[0][4][0])\n"
        "uvloop.run(main())\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SHIM), "KUBEJURY_E2E_HOSTS": str(table)}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "127.77.0.1"
