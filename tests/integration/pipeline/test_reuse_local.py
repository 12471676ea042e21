"""A leaderboard that grows, on the embedded models (issue 24 §5): reuse gives the fresh run's numbers.

Real: ``kubejury run`` in this process, real llama-cpp-python servers with the embedded GGUFs,
greedy generation with a fixed seed. Three runs share one storage root:

- ``board`` evaluates two models;
- ``board-grown`` evaluates the same two plus a third, with ``reuse.from: [board]``;
- ``fresh`` evaluates all three from nothing.

The report of ``board-grown`` must equal ``fresh``'s to the last digit (ranking, intervals,
significance, agreement, bias) — only the run's own name, provenance, the reuse section and the
latencies (a copied answer keeps the latency measured in the run that made it) may differ. The
servers evaluate every prompt whole (``kubejury.local.llama_entry``): with llama-cpp-python's
prompt-prefix reuse a greedy reply depended on the request before it, and this test failed. The test spies on the real client (:meth:`ChatClient.chat`) and on the server
launcher to count requests per served model and bring-ups: the grown run asks the old models
nothing, starts no server for them, and its judges judge only the new model's answers.
"""

from __future__ import annotations

import collections
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from kubejury.cli import main
from kubejury.files.shards import read_rows
from kubejury.files.storage import LocalStorage, RunLayout
from kubejury.inference.client import ChatClient, ChatResult
from kubejury.local import server as local_server

pytest.importorskip("llama_cpp", reason="needs llama-cpp-python (make venv builds the portable wheel)")

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[3]

OLD_MODELS = """
    - name: gemma
      runtime: llamacpp
      maxModelLen: 2048
    - name: smol
      runtime: llamacpp
      source: embedded://smollm2-135m-instruct-q4_1
      maxModelLen: 2048"""
NEW_MODEL = """
    - name: smol-short
      runtime: llamacpp
      source: embedded://smollm2-135m-instruct-q4_1
      maxModelLen: 1024"""


def spec(name: str, models: str, reuse: str = "") -> str:
    return f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: {name}
spec:
  benchmark:
    uri: {(REPO / "examples" / "benchmark-ru-sample.jsonl").as_uri()}
    filters:
      domains: [finance]
      limitPerCell: 1
  models:{models}
  judges:
    - name: judge-strict
      runtime: llamacpp
      promptVariant: strict
      maxModelLen: 3072
    - name: judge-lenient
      runtime: llamacpp
      promptVariant: lenient
      maxModelLen: 4096
  series:
    - name: primary
      temperature: 0
      repetitionPenalty: 1.2
      maxTokens: 24
      seed: 7
  judging:
    maxTokens: 64
  scoring:
    bootstrapSamples: 200
    seed: 11
{reuse}"""


class Spy:
    """First asks per served model name (a judge's re-ask after an unparsable reply is not a new
    judgment), and servers started, while the real ones do the work."""

    def __init__(self) -> None:
        self.requests: collections.Counter[str] = collections.Counter()
        self.started: list[str] = []

    def clear(self) -> None:
        self.requests.clear()
        self.started.clear()


@pytest.fixture
def spy(monkeypatch: pytest.MonkeyPatch) -> Iterator[Spy]:
    seen = Spy()
    real_chat = ChatClient.chat
    real_start = local_server.LlamaServer.start

    async def chat(self: ChatClient, body: dict[str, Any]) -> ChatResult:
        if len(body["messages"]) <= 2:  # a re-ask carries the judge's reply and one more question
            seen.requests[str(body.get("model"))] += 1
        return await real_chat(self, body)

    def start(self: local_server.LlamaServer) -> None:
        seen.started.append(f"{self.plan.model_path.name}@{self.plan.n_ctx}")
        real_start(self)

    monkeypatch.setattr(ChatClient, "chat", chat)
    monkeypatch.setattr(local_server.LlamaServer, "start", start)
    yield seen


def run(tmp_path: Path, out: Path, name: str, text: str) -> None:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text, encoding="utf-8")
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0


def report(out: Path, run_name: str) -> dict[str, Any]:
    data = json.loads((out / RunLayout(run_name).report_prefix / "report.json").read_text(encoding="utf-8"))
    assert isinstance(data, dict)
    return data


#: What may differ between a grown run and a fresh one: where and when it ran, and what it reused.
RUN_SPECIFIC = ("provenance", "inputs", "generated_at", "reuse", "gpu_usage", "run")


def results_only(document: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in document.items() if k not in RUN_SPECIFIC}


def differences(left: Any, right: Any, path: str = "") -> list[str]:
    """Every path at which two JSON documents differ, with both values; latencies excepted: a
    copied answer keeps the latency of the request that made it, in the run that made it."""
    if isinstance(left, dict) and isinstance(right, dict):
        keys = sorted(k for k in set(left) | set(right) if "latency" not in k)
        return [d for k in keys for d in differences(left.get(k), right.get(k), f"{path}.{k}")]
    if isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        return [
            d
            for i, (a, b) in enumerate(zip(left, right, strict=True))
            for d in differences(a, b, f"{path}[{i}]")
        ]
    return [] if left == right else [f"{path}: {left!r:.80} != {right!r:.80}"]


def test_a_grown_leaderboard_equals_a_fresh_run_and_asks_only_the_new_model(tmp_path: Path, spy: Spy) -> None:
    out = tmp_path / "runs"
    run(tmp_path, out, "board", spec("board", OLD_MODELS))
    assert spy.requests["gemma"] == 3 and spy.requests["smol"] == 3

    spy.clear()
    grown_spec = spec("board-grown", OLD_MODELS + NEW_MODEL, "  reuse:\n    from: [board]\n")
    run(tmp_path, out, "board-grown", grown_spec)
    grown_requests, grown_started = dict(spy.requests), sorted(spy.started)

    spy.clear()
    run(tmp_path, out, "fresh", spec("fresh", OLD_MODELS + NEW_MODEL))
    fresh_requests, fresh_started = dict(spy.requests), sorted(spy.started)

    # Only the new model generated; each judge judged only its three answers (of nine).
    assert fresh_requests == {"gemma": 3, "smol": 3, "smol-short": 3, "judge-strict": 9, "judge-lenient": 9}
    assert grown_requests == {"smol-short": 3, "judge-strict": 3, "judge-lenient": 3}
    # No server for a model with nothing left to answer: 3 bring-ups against 5.
    gemma, smol = "gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert fresh_started == sorted(
        [f"{gemma}@2048", f"{smol}@2048", f"{smol}@1024", f"{gemma}@3072", f"{gemma}@4096"]
    )
    assert grown_started == sorted([f"{smol}@1024", f"{gemma}@3072", f"{gemma}@4096"])

    # To the last digit: every number of the report is the fresh run's.
    grown, fresh = report(out, "board-grown"), report(out, "fresh")
    assert differences(results_only(grown), results_only(fresh)) == []

    # And the report and the stored records say what was reused, from which run.
    reused = grown["reuse"]
    assert reused["sources"] == ["board"]
    assert reused["models"]["gemma"]["from_runs"] == {"board": 3}
    assert reused["judges"]["judge-strict"]["from_runs"] == {"board": 6}
    store, layout = LocalStorage(out), RunLayout("board-grown")
    answers = list(read_rows(store, layout.answers_prefix("primary", "smol")))
    assert {a.get("reused_from") for a in answers} == {"board"}
    new_answers = list(read_rows(store, layout.answers_prefix("primary", "smol-short")))
    assert all(a.get("reused_from") is None for a in new_answers)
