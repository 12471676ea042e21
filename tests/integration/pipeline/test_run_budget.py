"""``kubejury run`` with ``spec.budget``: a clearly worse model stops early (issue 27).

A real run in a separate process against a loopback OpenAI-compatible stub that plays two strong
models, one weak model and a judge that scores the answers by their quality. The weak model must
be ruled out of the leading group before the last look, ask fewer questions than the others (the
stub counts each model's requests), and the report must say how many questions each model used
and why it stopped. A rerun asks nothing again.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import threading
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest

from loopback_http import LoopbackHTTP

pytestmark = pytest.mark.integration

DOMAINS, LEVELS, PER_CELL = ("law", "finance"), (1, 2, 3), 20
MODELS = {"strong-a": "отличный ответ", "strong-b": "отличный вариант", "weak": "слабый ответ"}


class QualityStub:
    """Counts generation requests per model and judging requests; the judge gives 8–10 to an
    answer marked good and 1–3 to one marked weak (a hash of the answer picks within the band)."""

    def __init__(self) -> None:
        self.generated: Counter[str] = Counter()
        self.judged = 0
        lock = threading.Lock()
        stub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._send({"object": "list", "data": [{"id": "stub", "object": "model"}]})

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
                last = str(body["messages"][-1]["content"])
                noise = int(hashlib.sha256(last.encode()).hexdigest(), 16) % 3
                if body.get("response_format"):
                    with lock:
                        stub.judged += 1
                    score = 8 + noise if "отличный" in last else 1 + noise
                    content = json.dumps({"rationale": "заглушка", "score": score}, ensure_ascii=False)
                else:
                    with lock:
                        stub.generated[body["model"]] += 1
                    content = f"{MODELS[body['model']]} на: {last[:40]}"
                self._send(
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
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
                    }
                )

            def _send(self, payload: dict[str, Any]) -> None:
                data = json.dumps(payload, ensure_ascii=False).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.http = LoopbackHTTP(Handler)

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/v1"


@pytest.fixture
def quality_stub() -> Iterator[QualityStub]:
    stub = QualityStub()
    try:
        yield stub
    finally:
        stub.http.close()


def write_benchmark(path: Path) -> Path:
    rows = [
        {
            "id": f"{d}-{lvl}-{i:02d}",
            "domain": d,
            "level": lvl,
            "question": f"Вопрос {d} {lvl} {i}?",
            "reference": "Эталон.",
        }
        for d in DOMAINS
        for lvl in LEVELS
        for i in range(PER_CELL)
    ]
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def write_spec(tmp_path: Path, url: str) -> Path:
    models = "".join(f"    - {{name: {m}, runtime: openai, source: {url}}}\n" for m in MODELS)
    spec = tmp_path / "budget.yaml"
    spec.write_text(
        f"""apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: budgeted
spec:
  benchmark:
    uri: {write_benchmark(tmp_path / "bench.jsonl").as_uri()}
  models:
{models}  judges:
    - {{name: judge-one, runtime: openai, source: {url}}}
  budget: {{mode: sequential, goal: leading-group, confidence: 0.95, minPerCell: 2}}
  scoring:
    bootstrapSamples: 200
  storage:
    uri: {(tmp_path / "out").as_uri()}
""",
        encoding="utf-8",
    )
    return spec


def kubejury_run(spec: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubejury.cli", "run", str(spec), "--no-progress"],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_clearly_worse_model_stops_early_and_the_report_says_so(
    tmp_path: Path, quality_stub: QualityStub
) -> None:
    total = len(DOMAINS) * len(LEVELS) * PER_CELL
    done = kubejury_run(write_spec(tmp_path, quality_stub.base_url))
    assert done.returncode == 0, done.stderr[-3000:]
    stored = json.loads(next((tmp_path / "out").rglob("sequential.json")).read_text(encoding="utf-8"))
    used = {m["model"]: m["questions"] for m in stored["models"]}
    weak = next(m for m in stored["models"] if m["model"] == "weak")
    assert weak["status"] == "stopped" and weak["reason"].startswith("out: below strong-")
    assert used["weak"] < min(used["strong-a"], used["strong-b"]) <= total
    assert weak["look"] < stored["looks_done"]  # ruled out before the last look done
    # The stub saw exactly the questions each model used, and one judgment per answer.
    assert dict(quality_stub.generated) == used
    assert quality_stub.judged == sum(used.values())
    assert f"weak stopped after {used['weak']} questions (out: below strong-" in done.stderr

    report = next((tmp_path / "out").rglob("report.json"))
    section = json.loads(report.read_text(encoding="utf-8"))["sequential"]
    assert section["models"]["weak"]["questions"] == used["weak"]
    assert section["questions_used"] == sum(used.values()) < section["questions_budgeted"] == 3 * total
    assert section["leading_group"] and "weak" not in section["leading_group"]
    markdown = report.with_name("report.md").read_text(encoding="utf-8")
    assert "## Sequential evaluation" in markdown and f"stopped: {weak['reason']}" in markdown
    assert "Sequential evaluation" in report.with_name("report.html").read_text(encoding="utf-8")

    generated, judged = sum(quality_stub.generated.values()), quality_stub.judged
    again = kubejury_run(write_spec(tmp_path, quality_stub.base_url))
    assert again.returncode == 0, again.stderr[-3000:]
    assert (sum(quality_stub.generated.values()), quality_stub.judged) == (generated, judged)


def test_the_stage_commands_run_the_same_looks_one_job_at_a_time(
    tmp_path: Path, quality_stub: QualityStub
) -> None:
    """What the operator's Jobs would run (docs/operator.md, "Sequential budgets"): per look, a
    generation Job per model, a judging Job, then the look Job; the decisions are those of
    ``kubejury run`` on the same spec, and a stopped model's generation Job asks nothing."""
    from kubejury.cli import main

    local = tmp_path / "local"
    local.mkdir()
    assert kubejury_run(write_spec(local, quality_stub.base_url)).returncode == 0
    expected = json.loads(next((local / "out").rglob("sequential.json")).read_text(encoding="utf-8"))
    quality_stub.generated.clear()

    spec = str(write_spec(tmp_path, quality_stub.base_url))
    for look in range(1, len(expected["prefix_sizes"]) + 1):
        for model in MODELS:
            assert main(["generate", "--evalrun", spec, "--model", model, "--look", str(look)]) == 0
        assert main(["judge", "--evalrun", spec, "--look", str(look)]) == 0
        assert main(["look", "--evalrun", spec, "--look", str(look)]) == 0
    stored = json.loads(next((tmp_path / "out").rglob("sequential.json")).read_text(encoding="utf-8"))
    assert stored["models"] == expected["models"]
    assert dict(quality_stub.generated) == {m["model"]: m["questions"] for m in expected["models"]}


def test_a_look_needs_a_budget(tmp_path: Path, quality_stub: QualityStub) -> None:
    from kubejury.cli import main

    spec = write_spec(tmp_path, quality_stub.base_url)
    spec.write_text(spec.read_text(encoding="utf-8").replace("  budget:", "  # budget:"), encoding="utf-8")
    assert main(["look", "--evalrun", str(spec), "--look", "1"]) == 2


def test_a_changed_budget_decides_again_from_the_first_look(
    tmp_path: Path, quality_stub: QualityStub
) -> None:
    spec = write_spec(tmp_path, quality_stub.base_url)
    assert kubejury_run(spec).returncode == 0
    weak_before = quality_stub.generated["weak"]
    spec.write_text(
        spec.read_text(encoding="utf-8").replace("minPerCell: 2}", "minPerCell: 2, looks: [0.5, 1.0]}")
    )
    again = kubejury_run(spec)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "spec.budget changed since the stored looks: deciding again from look 1" in again.stderr
    stored = json.loads(next((tmp_path / "out").rglob("sequential.json")).read_text(encoding="utf-8"))
    half = len(DOMAINS) * len(LEVELS) * PER_CELL // 2
    assert stored["prefix_sizes"] == [half, 2 * half]
    weak = next(m for m in stored["models"] if m["model"] == "weak")
    assert weak["questions"] == half and weak["status"] == "stopped"
    # the first run's answers were kept: only the rest of the new first look was asked of it
    assert quality_stub.generated["weak"] == half
    assert weak_before < half
