"""The one home of HTTP to models: an async OpenAI-compatible chat-completions client.

Every request kubejury sends to a model (generation and judging, vLLM, llama.cpp, Ollama,
SGLang or a hosted API) goes through :class:`ChatClient`. It exists so that the hard parts are
solved once: bounded concurrency per endpoint, one pooled keep-alive session per endpoint,
timeouts, retries with exponential backoff and jitter on 429/5xx/connection/read errors that
honour ``Retry-After``, a hard cap on attempts, per-request token usage and latency, and dropping
(once, logged) optional fields that a plain OpenAI API refuses.

The transport is aiohttp with orjson: at 256 requests in flight plain httpx was measured far too
slow on this kind of machine (see ``benchmarks/results/client_throughput.md``), and aiohttp is
already a dependency through kopf. The hot path avoids per-request allocations it does not need:
the body is serialised once per request, headers and timeouts live on the session, and cookies
are not tracked.

Failures after the last attempt are *values*, not exceptions: :class:`ChatResult` carries
``error`` and ``error_kind`` so a stage can record the failure and move on.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import random
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

import aiohttp
import orjson
from yarl import URL

from kubejury.inference.sampling import DROPPABLE_FIELDS, warn_dropped_once
from kubejury.redact import redact

log = logging.getLogger("kubejury.inference.client")

ErrorKind = Literal["connection", "timeout", "http", "malformed", "rejected"]

_RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})
_ERROR_SNIPPET = 300


@dataclass(frozen=True, slots=True)
class ClientSettings:
    """How hard to push an endpoint and how patiently to retry it."""

    max_in_flight: int = 64  # requests in flight per endpoint (spec.concurrency.requestsPerEndpoint)
    request_timeout_s: float = 600.0  # one attempt, start to last byte (long generations are slow)
    connect_timeout_s: float = 10.0
    max_attempts: int = 6  # hard cap, including the first attempt
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0
    retry_after_max_s: float = 120.0  # never sleep longer than this on one Retry-After
    keepalive_s: float = 60.0
    # A reply longer than this fails its request (kind "malformed", not retried): a 4k-token answer
    # is tens of KiB, and an endless 200 body was once buffered to 2.5 GB before a MemoryError.
    max_response_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be at least 1")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")


@dataclass(slots=True)
class ChatResult:
    """The outcome of one chat request after retries.

    ``latency_s`` is the duration of the final attempt (what the server took to answer);
    ``elapsed_s`` includes earlier attempts and backoff sleeps. On failure ``content`` is ``None``
    and ``error`` says what happened; ``error_kind`` lets callers tell an unreachable server
    (``connection``) from a refused request (``http``/``rejected``), a slow one (``timeout``) or a
    broken reply (``malformed``).
    """

    content: str | None
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    latency_s: float = 0.0
    elapsed_s: float = 0.0
    attempts: int = 0
    status: int | None = None
    error: str | None = None
    error_kind: ErrorKind | None = None
    raw_message: dict[str, Any] | None = None
    server_version: str | None = None  # the reply's system_fingerprint (llama.cpp: its build), if any

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(slots=True)
class ClientStats:
    """Counters of one endpoint since the client started (cheap; read by progress and benchmarks)."""

    requests: int = 0
    attempts: int = 0
    retries: int = 0
    failures: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    retry_reasons: dict[str, int] = field(default_factory=dict)


class ResponseTooLarge(Exception):
    """A reply longer than ``ClientSettings.max_response_bytes`` (reading stopped there)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"reply larger than {limit} bytes (spec.concurrency.maxResponseBytes); not read further"
        )


def chat_url(base_url: str) -> str:
    """The chat-completions URL of an OpenAI-compatible base URL.

    ``http://host:8000/v1`` → ``http://host:8000/v1/chat/completions``; a URL that already ends
    in ``/chat/completions`` is used as is.
    """
    url = base_url.rstrip("/")
    if url.endswith("/chat/completions"):
        return url
    return url + "/chat/completions"


def parse_retry_after(value: str | None, *, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date), else ``None``."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        current = datetime.now(UTC).timestamp() if now is None else now
        seconds = when.timestamp() - current
    if seconds != seconds:  # NaN
        return None
    return max(0.0, seconds)


def backoff_delay(attempt: int, settings: ClientSettings, rng: random.Random | None = None) -> float:
    """Exponential backoff with "equal jitter" before attempt ``attempt + 1`` (``attempt`` ≥ 1).

    Half of the exponential step is fixed (so retries really back off), half is random (so a
    crowd of clients does not retry in lock-step).
    """
    step = min(settings.backoff_max_s, settings.backoff_initial_s * (2.0 ** (attempt - 1)))
    draw = (rng or random).random()
    return step / 2.0 + draw * step / 2.0


def parse_completion(raw: bytes) -> tuple[str | None, str | None, int | None, int | None, dict[str, Any]]:
    """``(content, finish_reason, prompt_tokens, completion_tokens, message)`` of a 200 reply.

    Raises ``ValueError`` with a short reason for anything that is not a usable completion
    (truncated JSON, an ``error`` object, no choices).
    """
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"response is not valid JSON ({exc}); {len(raw)} bytes received") from None
    if not isinstance(data, dict):
        raise ValueError("response is not a JSON object")
    choices = data.get("choices")
    if not choices or not isinstance(choices, list):
        err = data.get("error")
        if err:
            raise ValueError(f"server returned an error object: {_snippet(orjson.dumps(err))}")
        raise ValueError("response has no choices")
    choice = choices[0]
    if not isinstance(choice, dict):
        raise ValueError("response choice is not an object")
    message = choice.get("message")
    if not isinstance(message, dict):
        raise ValueError("response choice has no message")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        raise ValueError("message content is not a string")
    usage = data.get("usage")
    prompt_tokens = completion_tokens = None
    if isinstance(usage, dict):
        pt = usage.get("prompt_tokens")
        ct = usage.get("completion_tokens")
        prompt_tokens = pt if isinstance(pt, int) else None
        completion_tokens = ct if isinstance(ct, int) else None
    finish = choice.get("finish_reason")
    return content, finish if isinstance(finish, str) else None, prompt_tokens, completion_tokens, message


def server_version(raw: bytes) -> str | None:
    """The ``system_fingerprint`` of a completion (the server's build or configuration, where the
    runtime reports one: llama.cpp does, vLLM does not); parsed again only when it is there."""
    if b'"system_fingerprint"' not in raw:
        return None
    value = orjson.loads(raw).get("system_fingerprint")
    return value if isinstance(value, str) else None


def _snippet(raw: bytes) -> str:
    """The start of an error body, credentials masked (a proxy may echo the request's headers)."""
    text = raw[:_ERROR_SNIPPET].decode("utf-8", "replace").strip()
    return redact(text + ("…" if len(raw) > _ERROR_SNIPPET else ""))


_WORD = re.compile(r"[A-Za-z_]+")


def rejected_field(status: int, raw: bytes, body: dict[str, Any]) -> str | None:
    """The optional request field a 400/422 reply complains about, if it names exactly one we sent."""
    if status not in (400, 422):
        return None
    words = set(_WORD.findall(raw[:2000].decode("utf-8", "replace")))
    named = [f for f in DROPPABLE_FIELDS if f in body and f in words]
    return named[0] if len(named) == 1 else None


class ChatClient:
    """Chat completions against one OpenAI-compatible endpoint.

    Use as ``async with ChatClient(url) as client: result = await client.chat(body)``; the
    session is created inside the running event loop. ``body`` is a complete request body
    (``model``, ``messages``, sampling fields, optional ``response_format``); see
    :func:`build_body`. At most ``settings.max_in_flight`` requests are in flight at once, shared
    by every caller of this client.
    """

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        settings: ClientSettings | None = None,
        runtime: str = "openai",
        name: str = "",
    ) -> None:
        self.base_url = base_url
        self.url = chat_url(base_url)
        self._url = URL(self.url)  # parsed once, not per request
        self.settings = settings or ClientSettings()
        self.runtime = runtime
        self.name = name or redact(base_url)
        self.public_url = redact(self.url)  # for messages: user:password@ masked
        self.stats = ClientStats()
        self._api_key = api_key
        self._session: aiohttp.ClientSession | None = None
        self._semaphore: asyncio.Semaphore | None = None
        self._dropped: set[str] = set()
        self._deadlines: dict[asyncio.Task[Any], float] = {}
        self._expired: set[asyncio.Task[Any]] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self._rng = random.Random()
        # replaceable in tests to observe backoff without waiting
        self.sleep: Callable[[float], Awaitable[None]] = asyncio.sleep

    # -- lifecycle ------------------------------------------------------------------------------
    async def start(self) -> None:
        if self._session is not None:
            return
        s = self.settings
        connector = aiohttp.TCPConnector(
            limit=s.max_in_flight,
            limit_per_host=0,
            ttl_dns_cache=300,
            keepalive_timeout=s.keepalive_s,
            enable_cleanup_closed=False,
        )
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        self._session = aiohttp.ClientSession(
            connector=connector,
            headers=headers,
            # Only connecting has an aiohttp timeout; the per-attempt deadline is kept by _watch().
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=s.connect_timeout_s),
            cookie_jar=aiohttp.DummyCookieJar(),
            trust_env=False,
            read_bufsize=2**16,
        )
        self._semaphore = asyncio.Semaphore(s.max_in_flight)
        self._watchdog = asyncio.get_running_loop().create_task(self._watch())

    async def close(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
            self._watchdog = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ChatClient:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def dropped_fields(self) -> frozenset[str]:
        """Optional fields this endpoint refused and that are no longer sent."""
        return frozenset(self._dropped)

    # -- requests -------------------------------------------------------------------------------
    async def chat(self, body: dict[str, Any]) -> ChatResult:
        """Send one chat-completion request with retries; never raises for server or network trouble."""
        if self._session is None or self._semaphore is None:
            await self.start()
        assert self._semaphore is not None
        async with self._semaphore:
            return await self._chat(body)

    async def _chat(self, body: dict[str, Any]) -> ChatResult:
        session = self._session
        assert session is not None
        settings = self.settings
        stats = self.stats
        stats.requests += 1
        if self._dropped:
            body = {k: v for k, v in body.items() if k not in self._dropped}
        payload = orjson.dumps(body)
        started = time.perf_counter()
        attempt = 0
        status: int | None = None
        error = ""
        kind: ErrorKind = "connection"
        task = asyncio.current_task()
        assert task is not None
        deadlines = self._deadlines
        timeout = settings.request_timeout_s
        while True:
            attempt += 1
            stats.attempts += 1
            retry_after: float | None = None
            t0 = time.perf_counter()
            deadlines[task] = t0 + timeout
            try:
                status, raw, retry_after_header = await self._post(payload)
            except asyncio.CancelledError:
                deadlines.pop(task, None)
                if not self._was_timed_out(task):
                    raise
                error, kind, status = f"no complete reply within {timeout:g} s", "timeout", None
            except TimeoutError:  # only connecting can time out inside aiohttp (see start())
                deadlines.pop(task, None)
                error, kind, status = (
                    f"could not connect within {settings.connect_timeout_s:g} s",
                    "connection",
                    None,
                )
            except ResponseTooLarge as exc:
                deadlines.pop(task, None)
                return self._failure(None, str(exc), "malformed", attempt, t0, started)
            except aiohttp.ClientPayloadError as exc:
                deadlines.pop(task, None)
                error, kind, status = f"reply cut off: {exc}", "malformed", None
            except (aiohttp.ClientError, OSError) as exc:
                deadlines.pop(task, None)
                error, kind, status = f"{type(exc).__name__}: {exc}", "connection", None
            else:
                deadlines.pop(task, None)
                if status == 200:
                    try:
                        content, finish, pt, ct, message = parse_completion(raw)
                    except ValueError as exc:
                        error, kind = str(exc), "malformed"
                    else:
                        now = time.perf_counter()
                        if pt is not None:
                            stats.prompt_tokens += pt
                        if ct is not None:
                            stats.completion_tokens += ct
                        return ChatResult(
                            server_version=server_version(raw),
                            content=content,
                            finish_reason=finish,
                            prompt_tokens=pt,
                            completion_tokens=ct,
                            latency_s=now - t0,
                            elapsed_s=now - started,
                            attempts=attempt,
                            status=status,
                            raw_message=message,
                        )
                else:
                    dropped = rejected_field(status, raw, body)
                    if dropped is not None:
                        self._dropped.add(dropped)
                        warn_dropped_once(
                            self.runtime,
                            str(body.get("model", self.name)),
                            dropped,
                            f"the server refused it (HTTP {status}: {_snippet(raw)})",
                        )
                        body = {k: v for k, v in body.items() if k != dropped}
                        payload = orjson.dumps(body)
                        attempt -= 1  # a refused optional field is not a failed attempt
                        stats.attempts -= 1
                        continue
                    error = f"HTTP {status}: {_snippet(raw)}"
                    if status not in _RETRY_STATUSES:
                        return self._failure(
                            status, error, "rejected" if status < 500 else "http", attempt, t0, started
                        )
                    kind = "http"
                    retry_after = parse_retry_after(retry_after_header)
            if attempt >= settings.max_attempts:
                return self._failure(
                    status, f"{error} (gave up after {attempt} attempts)", kind, attempt, t0, started
                )
            stats.retries += 1
            reason = str(status) if status is not None else kind
            stats.retry_reasons[reason] = stats.retry_reasons.get(reason, 0) + 1
            if retry_after is not None:
                delay = min(settings.retry_after_max_s, retry_after) + self._rng.random() * 0.1
            else:
                delay = backoff_delay(attempt, settings, self._rng)
            await self.sleep(delay)

    async def _post(self, payload: bytes) -> tuple[int, bytes, str | None]:
        """One HTTP exchange: status, body, ``Retry-After``. Raises on transport trouble."""
        assert self._session is not None
        limit = self.settings.max_response_bytes
        async with self._session.post(self._url, data=payload) as resp:
            if (resp.content_length or 0) > limit:
                raise ResponseTooLarge(limit)
            chunks: list[bytes] = []
            size = 0
            async for chunk in resp.content.iter_chunked(1 << 16):
                size += len(chunk)
                if size > limit:
                    raise ResponseTooLarge(limit)
                chunks.append(chunk)
            return resp.status, b"".join(chunks), resp.headers.get("Retry-After")

    def _was_timed_out(self, task: asyncio.Task[Any]) -> bool:
        """Whether the watchdog cancelled ``task``; if so, absorb that cancellation."""
        if task not in self._expired:
            return False
        self._expired.discard(task)
        task.uncancel()
        return task.cancelling() == 0  # still cancelled from elsewhere: let that cancellation win

    async def _watch(self) -> None:
        """Cancel attempts past their deadline.

        One sweep per ``min(1 s, timeout/4)`` replaces a timer per request (aiohttp's per-request
        total timeout costs measurably more CPU at hundreds of requests in flight). An attempt is
        cancelled at most one sweep interval after its deadline.
        """
        interval = min(1.0, max(0.005, self.settings.request_timeout_s / 4))
        deadlines, expired = self._deadlines, self._expired
        while True:
            await asyncio.sleep(interval)
            if not deadlines:
                continue
            now = time.perf_counter()
            for task, deadline in list(deadlines.items()):
                if deadline <= now and task not in expired:
                    expired.add(task)
                    task.cancel()

    def _failure(
        self, status: int | None, error: str, kind: ErrorKind, attempt: int, t0: float, started: float
    ) -> ChatResult:
        now = time.perf_counter()
        self.stats.failures += 1
        return ChatResult(
            content=None,
            latency_s=now - t0,
            elapsed_s=now - started,
            attempts=attempt,
            status=status,
            error=redact(error, (self._api_key,)),
            error_kind=kind,
        )


def build_body(
    model: str,
    messages: list[dict[str, str]],
    sampling_fields: dict[str, Any] | None = None,
    *,
    response_format: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A chat-completion request body: the served model id, messages, runtime-specific sampling."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if sampling_fields:
        body.update(sampling_fields)
    if response_format is not None:
        body["response_format"] = response_format
    return body


def json_schema_format(name: str, schema: dict[str, Any]) -> dict[str, Any]:
    """``response_format`` asking for structured output that matches ``schema``."""
    return {"type": "json_schema", "json_schema": {"name": name, "strict": True, "schema": schema}}


class EndpointPool:
    """One :class:`ChatClient` (one session, one concurrency bound) per endpoint base URL.

    Stages that talk to the same server (a model judged by itself, several series of one model)
    share its connection pool and its in-flight limit through this pool.
    """

    def __init__(self, settings: ClientSettings | None = None) -> None:
        self.settings = settings or ClientSettings()
        self._clients: dict[tuple[str, str | None], ChatClient] = {}

    def get(self, base_url: str, *, api_key: str | None = None, runtime: str = "openai") -> ChatClient:
        key = (chat_url(base_url), api_key)
        client = self._clients.get(key)
        if client is None:
            client = ChatClient(base_url, api_key=api_key, settings=self.settings, runtime=runtime)
            self._clients[key] = client
        return client

    async def close(self) -> None:
        clients, self._clients = list(self._clients.values()), {}
        await asyncio.gather(*(c.close() for c in clients))

    async def __aenter__(self) -> EndpointPool:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
