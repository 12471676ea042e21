"""A changed spec never reuses stale answers (issue 12 §3).

Reproduces the finding: a run at temperature 0, then the same run and series at 0.5. Before, no
new answer was written, spec.json was overwritten and the report showed the temperature-0 answers
as 0.5. Now the rerun stops with an error naming what changed, or, asked for a new version, writes
it beside the old one. A real loopback server plays the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubejury import pipeline
from kubejury.errors import SpecChanged
from kubejury.inference.client import ClientSettings, EndpointPool
from kubejury.testing.fault_server import FaultServer

pytestmark = pytest.mark.integration

SPEC = """\
apiVersion: kubejury.io/v1alpha1
kind: EvalRun
metadata:
  name: demo
spec:
  benchmark:
    uri: bench.jsonl
  models:
    - name: m1
      runtime: openai
      source: {url}
  judges:
    - name: j1
      runtime: openai
      source: {url}
  series:
    - name: t
      temperature: {temperature}
  storage:
    uri: {out}
"""


def _write(tmp_path: Path, url: str, temperature: float) -> str:
    bench = tmp_path / "bench.jsonl"
    bench.write_text(
        "".join(
            json.dumps({"id": f"q{i}", "domain": "d", "level": 1, "question": f"q{i}?", "reference": "r"})
            + "\n"
            for i in range(3)
        )
    )
    spec = tmp_path / f"spec-{temperature}.yaml"
    spec.write_text(SPEC.format(url=url, temperature=temperature, out=tmp_path / "out"))
    return str(spec)


async def _generate(spec_path: str, *, new_version: bool = False) -> pipeline.LoadedRun:
    inputs = pipeline.load_inputs(spec_path)
    changes = pipeline.spec_changes(inputs)  # what `kubejury run` checks first
    if changes and not new_version:
        raise pipeline.spec_changed_error(inputs, changes)
    if changes:
        inputs = pipeline.new_version(inputs)
    pipeline.record_spec(inputs)
    spec = inputs.evalrun.spec
    async with EndpointPool(ClientSettings(max_attempts=1)) as pool:
        endpoints = {m.name: m.source or "" for m in spec.all_endpoints()}
        await pipeline.generate(inputs, pool, endpoints, models=spec.models, series=spec.series)
    return inputs


async def test_a_rerun_at_another_temperature_stops_naming_the_change_and_writes_nothing(
    tmp_path: Path,
) -> None:
    async with FaultServer() as server:
        first = await _generate(_write(tmp_path, server.base_url, 0.0))
        asked = len(server.requests)
        stored = sorted(p.name for p in (tmp_path / "out" / "demo" / "t" / "answers" / "m1").iterdir())
        changed = pipeline.load_inputs(_write(tmp_path, server.base_url, 0.5))
        assert pipeline.spec_changes(changed) == ["generate m1/t: series.temperature: 0.0 → 0.5"] + [
            c for c in pipeline.spec_changes(changed) if c.startswith("judge")
        ]
        with pytest.raises(SpecChanged, match=r"series.temperature: 0.0 → 0.5.*--new-version"):
            await _generate(_write(tmp_path, server.base_url, 0.5))
        assert len(server.requests) == asked  # nothing asked
        assert (
            sorted(p.name for p in (tmp_path / "out" / "demo" / "t" / "answers" / "m1").iterdir()) == stored
        )
        assert first.storage.read_json("demo/spec.json")["spec"]["series"][0]["temperature"] == 0.0
        progress = first.storage.read_json(first.layout.progress_key("t", "generate", "m1"))
        assert progress["fingerprint"] == first.fingerprint("generate", "t", "m1").digest


async def test_a_new_version_is_written_beside_the_old_one_and_both_specs_are_kept(tmp_path: Path) -> None:
    async with FaultServer() as server:
        first = await _generate(_write(tmp_path, server.base_url, 0.0))
        second = await _generate(_write(tmp_path, server.base_url, 0.5), new_version=True)
        assert second.layout.run == "demo.v2"
        old = pipeline.stored_records(first)[0]
        new = pipeline.stored_records(second)[0]
        assert len(old) == len(new) == 3
        assert {a.fingerprint for a in old}.isdisjoint({a.fingerprint for a in new})
        assert [r["temperature"] for r in server.requests] == [0.0] * 3 + [0.5] * 3
        history = list((tmp_path / "out" / "demo" / "spec-history").iterdir())
        assert len(history) == 1 and (tmp_path / "out" / "demo.v2" / "spec-history").is_dir()


async def test_a_stage_job_meeting_records_of_another_spec_fails_before_asking(tmp_path: Path) -> None:
    # The operator's generation Job does not go through `kubejury run`'s pre-flight check: the stage
    # itself refuses, so even a Job never mixes records.
    async with FaultServer() as server:
        await _generate(_write(tmp_path, server.base_url, 0.0))
        inputs = pipeline.load_inputs(_write(tmp_path, server.base_url, 0.5))
        spec = inputs.evalrun.spec
        async with EndpointPool(ClientSettings(max_attempts=1)) as pool:
            with pytest.raises(SpecChanged, match="temperature"):
                await pipeline.generate(
                    inputs, pool, {"m1": server.base_url}, models=spec.models, series=spec.series
                )
        assert len(server.requests) == 3


async def test_the_report_carries_provenance_and_counts_truncated_answers_per_model(tmp_path: Path) -> None:
    import jsonschema

    from kubejury.report.json_report import load_schema

    long_answers = {"q0?", "q2?"}  # these two run past the series' max_tokens: finish_reason length

    def responder(body: dict[str, Any]) -> str:  # the request's JSON as the fault server parsed it
        messages = body.get("messages") or [{}]
        last = str(messages[-1].get("content", ""))
        if last in long_answers:
            return "word " * 400
        return "[[7]]" if "[[" in last or len(last) > 200 else "short answer"

    spec_path = _write(tmp_path, "URL", 0.0)
    async with FaultServer(responder=responder) as server:
        Path(spec_path).write_text(
            Path(spec_path)
            .read_text()
            .replace("URL", server.base_url)
            .replace("temperature: 0.0", "temperature: 0.0\n      maxTokens: 64")
        )
        inputs = pipeline.load_inputs(spec_path)
        spec = inputs.evalrun.spec
        async with EndpointPool(ClientSettings(max_attempts=1)) as pool:
            endpoints = {e.name: server.base_url for e in spec.all_endpoints()}
            await pipeline.generate(inputs, pool, endpoints, models=spec.models, series=spec.series)
            await pipeline.judge(inputs, pool, endpoints, judges=spec.judges, series=spec.series)
    _, written = pipeline.aggregate_run(inputs)
    document = json.loads(inputs.storage.read_bytes("demo/report/report.json"))
    jsonschema.validate(document, load_schema(), cls=jsonschema.Draft202012Validator)
    provenance = document["provenance"]
    assert provenance["truncated"] == {"t": {"m1": 2}}
    assert {(a["question_id"], a["finish_reason"]) for a in provenance["answers"]} == {
        ("q0", "length"),
        ("q1", "stop"),
        ("q2", "length"),
    }
    assert all(a["completion_tokens"] for a in provenance["answers"])
    assert set(provenance["fingerprints"]) == {"generate/t/m1", "judge/t/j1"}
    assert len(provenance["judge_prompt_template_sha256"]) == 64
    assert provenance["servers"]["m1"]["reported_versions"] == ["fault-server-1"]  # system_fingerprint
    markdown = inputs.storage.read_bytes("demo/report/report.md").decode()
    assert "## Provenance" in markdown and "| m1 | 2 |" in markdown
    assert "report.html" in written


async def test_kubejury_run_reproduction_temperature_0_then_0_5(tmp_path: Path) -> None:
    """The finding as a user meets it: `kubejury run` at temperature 0, then at 0.5."""
    import asyncio
    import sys

    async def run(spec_path: str, *extra: str) -> tuple[int, str]:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "kubejury.cli",
            "run",
            spec_path,
            "--no-progress",
            *extra,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=tmp_path,
        )
        out, err = await process.communicate()
        return process.returncode or 0, (out + err).decode()

    async with FaultServer(responder=lambda body: "[[7]]") as server:
        code, output = await run(_write(tmp_path, server.base_url, 0.0))
        assert code == 0, output
        asked = len(server.requests)
        code, output = await run(_write(tmp_path, server.base_url, 0.5))
        assert code == 2 and "Traceback" not in output
        assert "generate m1/t: series.temperature: 0.0 → 0.5" in output and "--new-version" in output
        assert len(server.requests) == asked
        code, output = await run(_write(tmp_path, server.base_url, 0.5), "--new-version")
        assert code == 0, output
    report = json.loads((tmp_path / "out" / "demo.v2" / "report" / "report.json").read_text())
    assert report["inputs"]["run"] == "demo.v2"
    assert [r.get("temperature") for r in server.requests if r.get("max_tokens") != 1024][-3:] == [0.5] * 3
    old = json.loads((tmp_path / "out" / "demo" / "spec.json").read_text())
    assert old["spec"]["series"][0]["temperature"] == 0.0
