"""Serve the operator's metrics while replaying one EvalRun's life through them (a child process).

Why this exists: the dashboards test needs the operator's ``/metrics`` after a real run, as
Prometheus would scrape it. This runs the operator's own metrics module (the registry, the HTTP
server, :func:`kubejury_operator.metrics.observation` and :func:`observe_run`, ``track_reconcile``
around each tick) and feeds it, tick by tick, the status and progress records a reconcile loop
sees for a two-model, two-judge run: provisioning, generation at a steady rate, judging (one judge
with two timed-out requests and one unparsable reply), aggregation, then Succeeded — and keeps
reconciling the finished run, as the operator's timer does. Stage timestamps are wall-clock, so
stage durations are real seconds. What is simulated: the cluster and the Jobs (the statuses and
records are built here, in the shapes ``kubejury_operator.status`` and the stages write).

Usage: ``python metrics_replay.py PORT TICK_SECONDS``; prints ``serving`` once the server is up and
``finished`` when the run reached Succeeded.
"""

from __future__ import annotations

import datetime
import sys
import time
from typing import Any

from kubejury.records.gpu_usage import GpuUsage, ServerGpuUsage
from kubejury.records.progress import ProgressRecord, ProgressState
from kubejury.records.timestamps import seconds_between
from kubejury_operator import metrics

NAMESPACE, NAME = "team-law", "law-run"
MODELS, JUDGES, QUESTIONS, PER_TICK = ("qwen", "gemma"), ("gemma", "mistral"), 24, 4


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def condition(ctype: str, at: str | None) -> dict[str, Any]:
    return {"type": ctype, "status": "True" if at else "False", "lastTransitionTime": at or now()}


def gpu_usage(started: str | None, gen_done: str | None, judge_done: str | None) -> GpuUsage:
    """status.gpu as the operator keeps it: each model's server Ready from the start until its
    generation ends (used for 90% of it), each judge's from then until judging ends (all used)."""
    servers = []
    for m in MODELS:
        held = 2 * seconds_between(started, gen_done) if gen_done else 0.0
        open_since = started if started and not gen_done else None
        servers.append(
            ServerGpuUsage(m, "model", 2, "NVIDIA-H100-80GB-HBM3", held, 0.9 * held, open_since, open_since)
        )
    for j in JUDGES:
        held = seconds_between(gen_done, judge_done) if judge_done else 0.0
        open_since = gen_done if gen_done and not judge_done else None
        servers.append(ServerGpuUsage(j, "judge", 1, "NVIDIA-L4", held, held, open_since, open_since))
    return GpuUsage(tuple(servers))


def main() -> int:
    port, tick = int(sys.argv[1]), float(sys.argv[2])
    metrics.start_metrics_server(port, addr="127.0.0.1")
    metrics.set_build_info("0.1.0")
    print("serving", flush=True)
    generated = dict.fromkeys(MODELS, 0)
    judged = dict.fromkeys(JUDGES, 0)
    started = gen_done = judge_done = succeeded = None
    step, announced = 0, False
    while True:
        step += 1
        records: dict[tuple[str, str, str], ProgressRecord] = {}
        with metrics.track_reconcile("timer"):
            if step == 3:  # one "not yet": progress unreadable for a moment, kopf retries the handler
                try:
                    with metrics.track_reconcile("timer"):
                        raise RuntimeError("progress record not readable yet")
                except RuntimeError:
                    pass
            if step > 2 and started is None:
                started = now()
            if started and gen_done is None:
                for m in MODELS:
                    generated[m] = min(QUESTIONS, generated[m] + PER_TICK)
                if all(v == QUESTIONS for v in generated.values()):
                    gen_done = now()
            elif gen_done and judge_done is None:
                for j in JUDGES:
                    judged[j] = min(2 * QUESTIONS, judged[j] + 2 * PER_TICK)
                if all(v == 2 * QUESTIONS for v in judged.values()):
                    judge_done = now()
            elif judge_done and succeeded is None:
                succeeded = now()
            for m in MODELS:
                state: ProgressState = "succeeded" if generated[m] == QUESTIONS else "running"
                records[("generate", "primary", m)] = ProgressRecord(
                    stage="generate", series="primary", name=m, total=QUESTIONS, done=generated[m],
                    rate_per_s=PER_TICK / tick if started else 0.0, state=state)  # fmt: skip
            if gen_done:
                for j in JUDGES:
                    trouble = j == "mistral"
                    records[("judge", "primary", j)] = ProgressRecord(
                        stage="judge", series="primary", name=j, total=2 * QUESTIONS, done=judged[j],
                        errors=2 if trouble and judged[j] >= 16 else 0,
                        parse_failures=1 if trouble and judged[j] >= 24 else 0,
                        rate_per_s=2 * PER_TICK / tick,
                        state="succeeded" if judged[j] == 2 * QUESTIONS else "running")  # fmt: skip
            phase = (
                "Succeeded" if succeeded else "Aggregating" if judge_done else "Judging" if gen_done
                else "Generating" if started else "Provisioning"
            )  # fmt: skip
            status = {
                "phase": phase,
                "startedAt": started,
                "stages": {
                    "generation": {"done": sum(generated.values()), "total": QUESTIONS * len(MODELS)},
                    "judging": {
                        "done": sum(judged.values()),
                        "total": 2 * QUESTIONS * len(JUDGES) if gen_done else 0,
                    },
                    "aggregation": {"done": 1 if succeeded else 0, "total": 1},
                },
                "gpu": gpu_usage(started, gen_done, judge_done).to_json() if started else None,
                "conditions": [
                    condition("GenerationComplete", gen_done),
                    condition("JudgingComplete", judge_done),
                    condition("Succeeded", succeeded),
                ],
            }
            metrics.observe_run(metrics.observation(NAMESPACE, NAME, status, records))
        if phase == "Succeeded" and not announced:
            announced = True
            print("finished", flush=True)
        time.sleep(tick)


if __name__ == "__main__":
    raise SystemExit(main())
