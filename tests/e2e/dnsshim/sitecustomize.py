"""Cluster DNS for processes the e2e harness runs as pods: ``*.svc`` names resolve to loopback.

Why this exists: there is no cluster network here. The simulated kubelet (``kubelet_runner``)
puts this directory on ``PYTHONPATH`` of every Job process, so Python imports it at start-up
(``sitecustomize``). It wraps :func:`socket.getaddrinfo` and uvloop's ``Loop.getaddrinfo``
(the stages run on uvloop, which resolves through libuv): a name ``<svc>.<ns>.svc``,
``<svc>.<ns>.svc.cluster.local`` or ``<svc>.<ns>`` (the pod's DNS search path) is looked up in the
JSON file named by ``KUBEJURY_E2E_HOSTS`` (name → loopback address of that Service's stub server,
re-read on every lookup so Services created later resolve); a ``.svc`` name that is not there
fails like an NXDOMAIN answer. Every other name goes to the real resolver. The process's argv,
environment and files keep the exact URLs the operator wrote.
"""

from __future__ import annotations

import json
import os
import socket
from typing import Any

_HOSTS = os.environ.get("KUBEJURY_E2E_HOSTS", "")
_real_getaddrinfo = socket.getaddrinfo


def _cluster_name(host: str) -> str | None:
    name = host.rstrip(".").lower()
    for suffix in (".svc.cluster.local", ".svc"):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    if name.count(".") == 1 and not name.replace(".", "").isdigit():
        return name  # "<svc>.<ns>" through the search path
    return None


def _lookup(host: str) -> str | None:
    short = _cluster_name(host)
    if short is None:
        return None
    try:
        with open(_HOSTS, encoding="utf-8") as handle:
            table: dict[str, str] = json.load(handle)
    except (OSError, ValueError):
        table = {}
    address = table.get(short)
    if address is None and host.rstrip(".").lower().endswith((".svc", ".svc.cluster.local")):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
    return address


def getaddrinfo(host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
    if isinstance(host, bytes):
        host = host.decode()
    if isinstance(host, str) and _HOSTS:
        address = _lookup(host)
        if address is not None:
            host = address
    return _real_getaddrinfo(host, port, *args, **kwargs)


socket.getaddrinfo = getaddrinfo


def _patch_uvloop() -> None:
    """The stages run on uvloop, whose ``getaddrinfo`` is libuv's, not :mod:`socket`'s."""
    try:
        import uvloop
    except ImportError:
        return
    original = uvloop.Loop.getaddrinfo

    async def loop_getaddrinfo(self: Any, host: Any, port: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, bytes):
            host = host.decode()
        if isinstance(host, str) and _HOSTS:
            host = _lookup(host) or host
        return await original(self, host, port, *args, **kwargs)

    uvloop.Loop.getaddrinfo = loop_getaddrinfo  # type: ignore[method-assign]  # the shim's point: wrap the resolver


if _HOSTS:
    _patch_uvloop()
