"""The chart's webhook wiring, exercised for real on loopback: kopf's webhook server, configured by
the operator's own ``configure_admission`` from the chart's rendered settings, serves the
chart-generated certificate; a client that trusts only the chart's caBundle and checks the Service's
DNS name (as the API server does) reaches the path the chart's webhook configuration names, and
kopf hands the request to the handler id in that path.

Simulated part: the API server. The client below plays it (TLS verification against caBundle,
server name = the Service's DNS name, POST of an AdmissionReview to clientConfig.service.path);
the listening address is 127.0.0.1 instead of the Service.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import socket
import ssl
import subprocess
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any, cast

import aiohttp
import kopf
import pytest
import yaml

from kubejury_operator.kopf_setup import configure_admission

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kubejury"


def helm() -> str:
    found = shutil.which("helm")
    cache = Path(os.environ.get("KUBEJURY_CACHE", Path.home() / ".cache" / "kubejury")) / "bin" / "helm"
    if found:
        return found
    if cache.is_file():
        return str(cache)
    pytest.fail(f"helm not found on PATH or at {cache}; run `make helm`")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.mark.integration
async def test_kopf_serves_the_chart_certificate_on_the_configured_path(tmp_path: Path) -> None:
    rendered = subprocess.run(
        [helm(), "template", "kj", str(CHART), "--namespace", "kubejury"],
        capture_output=True,
        text=True,
        check=True,
        env={
            **os.environ,
            "HELM_CACHE_HOME": str(tmp_path / "helm"),
            "HELM_CONFIG_HOME": str(tmp_path / "helm"),
        },
    )
    objects = [o for o in yaml.safe_load_all(rendered.stdout) if o]
    (secret,) = [o for o in objects if o["kind"] == "Secret"]
    (config,) = [o for o in objects if o["kind"] == "ValidatingWebhookConfiguration"]
    (settings,) = [
        o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-settings")
    ]
    (webhook,) = config["webhooks"]
    service = webhook["clientConfig"]["service"]

    # The Secret as the kubelet would mount it.
    mount = tmp_path / "webhook-tls"
    mount.mkdir()
    for key in ("tls.crt", "tls.key"):
        (mount / key).write_bytes(base64.b64decode(secret["data"][key]))
    env = dict(settings["data"])
    env["KUBEJURY_WEBHOOK_CERT"] = str(mount / "tls.crt")
    env["KUBEJURY_WEBHOOK_KEY"] = str(mount / "tls.key")
    env["KUBEJURY_WEBHOOK_PORT"] = str(free_port())
    env["KUBEJURY_WEBHOOK_ADDR"] = "127.0.0.1"

    operator_settings = kopf.OperatorSettings()
    configure_admission(operator_settings, env)
    server = operator_settings.admission.server
    assert isinstance(server, kopf.WebhookServer)

    seen: list[dict[str, Any]] = []

    async def handler(
        request: Any,
        *,
        webhook: str | None = None,
        headers: dict[str, str] | None = None,
        sslpeer: dict[str, Any] | None = None,
    ) -> Any:
        seen.append({"webhook": webhook, "uid": request["request"]["uid"]})
        return {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "response": {"uid": request["request"]["uid"], "allowed": True},
        }

    serving = cast("AsyncGenerator[Any, None]", server(handler))
    await serving.__anext__()  # the server is listening once it yields its client config
    try:
        trust = ssl.create_default_context(
            cadata=base64.b64decode(webhook["clientConfig"]["caBundle"]).decode()
        )
        review = {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {"uid": "7f0b2a5e", "operation": "CREATE"},
        }
        url = f"https://127.0.0.1:{env['KUBEJURY_WEBHOOK_PORT']}{service['path']}"
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url,
                data=json.dumps(review),
                headers={"Content-Type": "application/json"},
                ssl=trust,
                server_hostname=f"{service['name']}.{service['namespace']}.svc",
            ) as reply,
        ):
            assert reply.status == 200, await reply.text()
            answer = await reply.json()
        assert answer["response"] == {"uid": "7f0b2a5e", "allowed": True}
        assert seen == [
            {"webhook": webhook["clientConfig"]["service"]["path"].lstrip("/"), "uid": "7f0b2a5e"}
        ]
        assert seen[0]["webhook"] == "validate-evalrun"

        # A client that does not trust the chart's CA is refused at the TLS layer.
        async with aiohttp.ClientSession() as session:
            with pytest.raises(aiohttp.ClientConnectorCertificateError):
                await session.post(url, data=b"{}", ssl=ssl.create_default_context())
    finally:
        await serving.aclose()
        await asyncio.sleep(0)
