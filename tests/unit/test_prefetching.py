"""Weights before GPUs: the prefetch Job's shape, the server started from the cache, and the planner's
order (a download overlaps earlier models' serving and takes no maxConcurrentModels slot)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from factories import (
    H100_PLACEMENT,
    JOB_DONE,
    JOB_FAILED,
    JOB_RUNNING,
    RUN_REF,
    build_cluster_run,
    build_evalrun,
    endpoint,
    generation_jobs,
    oom_killed,
    ready_servers,
    workload_of,
)
from kubejury.config.spec import parse_evalrun
from kubejury.files.weight_cache import model_dir
from kubejury_operator import manifests as mf
from kubejury_operator.cluster_run import ClusterRun, cluster_run, with_settings
from kubejury_operator.observed import Observed
from kubejury_operator.prefetching import prefetch_job_name, prefetches
from kubejury_operator.preview import simulate
from kubejury_operator.reconcile import Plan, plan
from kubejury_operator.settings import WorkloadSettings

NOW = "2026-12-03T10:00:00Z"
CACHE = WorkloadSettings(model_cache_pvc="weights", model_cache_prefetch=True)


def cached(run: ClusterRun) -> ClusterRun:
    return with_settings(run, model_cache_pvc="weights", model_cache_prefetch=True)


def creates(p: Plan, kind: str) -> set[str]:
    return {a.name for a in p.actions if a.verb == "create" and a.kind == kind}


def prefetch_of(key: str) -> str:
    return prefetch_job_name("r", key)


def _container(manifest: dict[str, Any]) -> dict[str, Any]:
    container: dict[str, Any] = manifest["spec"]["template"]["spec"]["containers"][0]
    return container


# ------------------------------------------------------------------------------------ manifests


def test_the_prefetch_job_is_cpu_only_tokenless_and_writes_only_the_cache_claim() -> None:
    model = endpoint("model", "a")
    job = mf.prefetch_job(RUN_REF, model, CACHE)
    pod = job["spec"]["template"]["spec"]
    container = _container(job)
    assert container["args"] == [
        "prefetch",
        "--source",
        "hf://org/a",
        "--runtime",
        "vllm",
        "--cache",
        "/models/cache",
    ]
    assert not any("gpu" in k for part in container["resources"].values() for k in part)
    assert "nodeSelector" not in pod and "tolerations" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert {v["name"]: v for v in pod["volumes"]}["model-cache"] == {
        "name": "model-cache",
        "persistentVolumeClaim": {"claimName": "weights"},
    }
    assert [m["mountPath"] for m in container["volumeMounts"]] == ["/models/cache", "/tmp"]
    assert pod["securityContext"]["runAsUser"] == mf.SERVER_UID  # the servers' own files
    assert job["metadata"]["name"] == prefetch_of("m-a")
    assert job["metadata"]["labels"]["kubejury.io/component"] == "prefetch"
    assert "kubejury.io/uses-server" not in job["metadata"]["labels"]  # never GPU time used


def test_an_s3_prefetch_gets_the_runs_storage_keys_and_an_hf_one_only_the_hub_token() -> None:
    settings = replace(CACHE, storage_secret="store", s3_endpoint="http://minio:9000")
    s3_model = replace(endpoint("model", "a"), source="s3://w/llm")
    names = {e["name"] for e in _container(mf.prefetch_job(RUN_REF, s3_model, settings))["env"]}
    assert {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "KUBEJURY_S3_ENDPOINT"} <= names
    hf_names = {
        e["name"] for e in _container(mf.prefetch_job(RUN_REF, endpoint("model", "a"), settings))["env"]
    }
    assert "HF_TOKEN" in hf_names and "AWS_SECRET_ACCESS_KEY" not in hf_names


MIRROR = "http://hub-mirror.example:8080"


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_the_charts_hub_mirror_reaches_every_hf_download_and_no_run_spec_changes_it() -> None:
    settings = replace(CACHE, hub_endpoint=MIRROR, storage_secret="store")
    gguf = endpoint(
        "model", "a", placement=replace(H100_PLACEMENT, quantization="q4_k_m"), runtime="llamacpp"
    )
    assert _env(_container(mf.prefetch_job(RUN_REF, gguf, settings)))["HF_ENDPOINT"] == MIRROR
    s3_model = replace(endpoint("model", "a"), source="s3://w/llm")
    assert "HF_ENDPOINT" not in _env(_container(mf.prefetch_job(RUN_REF, s3_model, settings)))
    # a llama.cpp server that pulls its own GGUF (no cache claim) pulls it from the mirror too
    pulling = _container(mf.model_deployment(RUN_REF, gguf, 1, replace(settings, model_cache_pvc=None)))
    assert "--hf-repo" in pulling["args"] and _env(pulling)["HF_ENDPOINT"] == MIRROR
    assert "HF_ENDPOINT" not in _env(_container(mf.model_deployment(RUN_REF, gguf, 1, CACHE)))
    # a run that names its own cache claim and hub token still downloads from the chart's mirror
    body = build_evalrun(
        modelCache={"claimName": "mine"}, hfTokenSecretRef={"name": "tok", "key": "HF_TOKEN"}
    )
    assert cluster_run(body, parse_evalrun(body), {}, settings).settings.hub_endpoint == MIRROR


def test_a_prefetched_vllm_server_loads_the_cache_folder_without_streaming_from_s3() -> None:
    model = replace(endpoint("model", "a"), source="s3://w/llm")
    settings = replace(CACHE, storage_secret="store")
    container = _container(mf.model_deployment(RUN_REF, model, 1, settings))
    args = container["args"]
    assert args[args.index("--model") + 1] == model_dir("/models/cache", "s3://w/llm", "")
    assert "runai_streamer" not in args
    assert "AWS_SECRET_ACCESS_KEY" not in {e["name"] for e in container["env"]}  # it reads no store
    assert {"name": "HF_HUB_OFFLINE", "value": "1"} in container["env"]  # nor the hub
    streaming = _container(
        mf.model_deployment(RUN_REF, model, 1, replace(settings, model_cache_prefetch=False))
    )
    assert "runai_streamer" in streaming["args"]


def test_a_prefetched_llama_cpp_server_loads_the_gguf_entry_instead_of_pulling_from_the_hub() -> None:
    gguf = endpoint(
        "model", "a", placement=replace(H100_PLACEMENT, quantization="q4_k_m"), runtime="llamacpp"
    )
    args = _container(mf.model_deployment(RUN_REF, gguf, 1, CACHE))["args"]
    assert "--hf-repo" not in args
    assert (
        args[args.index("--model") + 1] == model_dir("/models/cache", "hf://org/a", "Q4_K_M") + "/model.gguf"
    )
    job_args = _container(mf.prefetch_job(RUN_REF, gguf, CACHE))["args"]
    assert job_args[-2:] == ["--quantization", "Q4_K_M"]


def test_nothing_is_prefetched_without_a_claim_or_for_ollama_and_volume_sources() -> None:
    model = endpoint("model", "a")
    assert prefetches(model, CACHE)
    assert not prefetches(model, replace(CACHE, model_cache_pvc=None))  # an emptyDir per Pod
    assert not prefetches(model, replace(CACHE, model_cache_prefetch=False))
    assert not prefetches(replace(model, source="pvc://claim/m"), CACHE)
    assert not prefetches(replace(model, runtime="ollama", source="ollama://llama3"), CACHE)


# -------------------------------------------------------------------------------------- planner


def test_a_fresh_run_downloads_first_and_creates_no_server_until_its_weights_are_in() -> None:
    run = cached(build_cluster_run(max_models=1))
    p = plan(run, Observed(), {}, NOW)
    assert creates(p, "Deployment") == set()
    # the model wanted now, the next one (a lookahead of maxConcurrentModels) and the judge
    assert creates(p, "Job") == {prefetch_of("m-a"), prefetch_of("m-b"), prefetch_of("j-j")}
    running = Observed(jobs={prefetch_of("m-a"): JOB_RUNNING, prefetch_of("m-b"): JOB_RUNNING})
    assert creates(plan(run, running, {}, NOW), "Deployment") == set()
    done = Observed(jobs={prefetch_of("m-a"): JOB_DONE, prefetch_of("m-b"): JOB_RUNNING})
    assert creates(plan(run, done, {}, NOW), "Deployment") == {workload_of("m-a")}


def test_the_next_models_download_overlaps_serving_and_takes_no_slot() -> None:
    run = cached(build_cluster_run(max_models=1))
    serving = Observed(
        deployments=ready_servers("m-a"),
        jobs={prefetch_of("m-a"): JOB_DONE, **generation_jobs(["a"], JOB_RUNNING)},
    )
    p = plan(run, serving, {"phase": "Generating"}, NOW)
    assert prefetch_of("m-b") in creates(p, "Job")  # b's weights come while a serves
    assert prefetch_of("m-c") not in creates(p, "Job")  # one slot: one model ahead
    assert creates(p, "Deployment") == set()  # and b's server waits for a's slot
    # a finished: b's server is created at once, its weights already in the cache
    after = Observed(
        deployments=ready_servers("m-a"),
        jobs={prefetch_of("m-a"): JOB_DONE, prefetch_of("m-b"): JOB_DONE, **generation_jobs(["a"], JOB_DONE)},
    )
    later = plan(run, after, {"phase": "Generating"}, NOW)
    assert workload_of("m-b") in creates(later, "Deployment")
    assert prefetch_of("m-c") in creates(later, "Job")


def test_downloads_do_not_count_against_max_concurrent_models() -> None:
    run = cached(build_cluster_run(max_models=2))
    downloading = Observed(jobs={prefetch_of(k): JOB_RUNNING for k in ("m-a", "m-b", "m-c", "j-j")})
    weights_in = Observed(jobs={prefetch_of(k): JOB_DONE for k in ("m-a", "m-b", "m-c", "j-j")})
    assert creates(plan(run, downloading, {}, NOW), "Deployment") == set()
    assert creates(plan(run, weights_in, {}, NOW), "Deployment") == {workload_of("m-a"), workload_of("m-b")}


def test_a_failed_download_fails_the_run_naming_its_job() -> None:
    run = cached(build_cluster_run(max_models=1))
    p = plan(run, Observed(jobs={prefetch_of("m-a"): JOB_FAILED}), {}, NOW)
    assert p.phase == "Failed"
    assert prefetch_of("m-a") in str(p.status["conditions"])


def test_without_a_claim_servers_start_at_once_as_before() -> None:
    p = plan(build_cluster_run(max_models=1), Observed(), {}, NOW)
    assert creates(p, "Deployment") == {workload_of("m-a")}
    assert creates(p, "Job") == set()


def test_the_manifest_preview_shows_each_download_before_its_server() -> None:
    names = [(m["kind"], m["metadata"]["name"]) for m in simulate(cached(build_cluster_run(max_models=1)))]
    for key in ("m-a", "m-b", "m-c", "j-j"):
        assert names.index(("Job", prefetch_of(key))) < names.index(("Deployment", workload_of(key)))


def test_a_server_already_there_needs_no_download_again() -> None:
    run = cached(build_cluster_run(max_models=1))
    # the operator restarted after the Job was cleaned up: the Deployment proves the weights are in
    serving = Observed(deployments=ready_servers("m-a"), jobs=generation_jobs(["a"], JOB_RUNNING))
    assert prefetch_of("m-a") not in creates(plan(run, serving, {"phase": "Generating"}, NOW), "Job")


def test_a_queued_run_sends_its_downloads_through_its_local_queue() -> None:
    run = replace(cached(build_cluster_run(max_models=1)), queue_name="team-a")
    jobs = [a.manifest for a in plan(run, Observed(), {}, NOW).actions if a.kind == "Job" and a.manifest]
    assert jobs and all(j["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-a" for j in jobs)


def test_an_oom_killed_download_is_replaced_with_more_memory_and_the_run_waits_for_it() -> None:
    run = cached(build_cluster_run(max_models=1))
    p = plan(run, Observed(jobs={prefetch_of("m-a"): oom_killed(limit="2Gi")}), {}, NOW)
    replacements = [
        a.manifest for a in p.actions if a.kind == "Job" and a.name.startswith(prefetch_of("m-a") + "-oom")
    ]
    assert len(replacements) == 1 and replacements[0] is not None
    limits = _container(replacements[0])["resources"]["limits"]
    assert limits["memory"] == "4Gi"
    assert p.phase != "Failed"
    assert creates(p, "Deployment") == set()
