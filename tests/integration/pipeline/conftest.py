"""Real servers on loopback for the pipeline's reliability tests.

- ``s3_env``: the environment a Job gets for the S3 endpoint of ``tests/conftest.py``'s
  ``moto_endpoint`` (a real server speaking the S3 protocol over HTTP, not a mock of boto3).
- ``https_server``: a loopback HTTPS file server with a throwaway self-signed certificate,
  trusted through ``SSL_CERT_FILE`` exactly as a user would trust a private CA.
"""

from __future__ import annotations

import datetime as dt
import http.server
import ipaddress
import ssl
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


@pytest.fixture
def s3_env(moto_endpoint: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Credentials and endpoint in the environment, as a Job would get them."""
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_REGION", "us-east-1")
    monkeypatch.setenv("KUBEJURY_S3_ENDPOINT", moto_endpoint)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    return moto_endpoint


@pytest.fixture
def bucket(s3_env: str) -> str:
    import boto3

    name = f"kj-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3", endpoint_url=s3_env, region_name="us-east-1")
    client.create_bucket(Bucket=name)
    return name


def _self_signed(tmp: Path) -> tuple[Path, Path]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(hours=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp / "cert.pem", tmp / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    return cert_path, key_path


@pytest.fixture
def https_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, Path]]:
    """(base URL, directory served). The certificate is trusted via SSL_CERT_FILE."""
    served = tmp_path / "www"
    served.mkdir()
    cert, key = _self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert))

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(served), **kwargs)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    httpd.socket = context.wrap_socket(httpd.socket, server_side=True)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{httpd.server_address[1]}", served
    finally:
        httpd.shutdown()
        httpd.server_close()


class StubChatServer:
    """A real HTTP OpenAI-compatible chat server on loopback with a fixed per-request latency.

    Generation requests get an answer naming the question; judging requests (the ones carrying
    ``response_format``) get a JSON verdict whose score is derived from the answer text, so scores
    vary but are reproducible. Runs in a thread of the test process, so a ``kubejury`` subprocess
    can be killed while the server keeps its own count of requests.
    """

    def __init__(self, latency_s: float = 0.0) -> None:
        self.latency_s = latency_s
        self.requests = 0
        self._lock = threading.Lock()
        stub = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send(200, {"object": "list", "data": [{"id": "stub", "object": "model"}]})

            def do_POST(self) -> None:
                import hashlib
                import json
                import time

                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with stub._lock:
                    stub.requests += 1
                if stub.latency_s:
                    time.sleep(stub.latency_s)
                last = str((body.get("messages") or [{}])[-1].get("content", ""))
                if body.get("response_format"):
                    score = int(hashlib.sha256(last.encode()).hexdigest(), 16) % 11
                    content = json.dumps({"rationale": "заглушка", "score": score}, ensure_ascii=False)
                else:
                    content = f"Ответ на: {last[:60]}"
                self._send(
                    200,
                    {
                        "id": "stub",
                        "object": "chat.completion",
                        "model": body.get("model", "stub"),
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": content},
                                "finish_reason": "stop",
                            }
                        ],
                        "usage": {
                            "prompt_tokens": len(last),
                            "completion_tokens": len(content),
                            "total_tokens": 0,
                        },
                    },
                )

            def _send(self, status: int, payload: dict[str, Any]) -> None:
                import json

                data = json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()


@pytest.fixture
def stub_server() -> Iterator[StubChatServer]:
    server = StubChatServer(latency_s=0.03)
    server.start()
    try:
        yield server
    finally:
        server.stop()
