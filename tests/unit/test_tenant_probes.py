"""Issue 29's policy probes: checks a space, an underscore or a letter's case used to defeat.

Each test holds a form a tenant tried (with only the chart's ``evalrun-editor`` role) that the chart's
allow-lists let through before the policy ran on the parsed, canonical spec: the form rendered into
the container, not the text the tenant typed. The real control plane checks the same forms through
the admission webhook in ``tests/e2e/test_tenant_refusals_e2e.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from factories import build_evalrun, model_entry
from kubejury.config.spec import parse_evalrun
from kubejury_operator.tenancy import TenantPolicy, policy_problems, server_arg_problems

CHART_LIKE = TenantPolicy(
    storage_roots=("s3://evals/{namespace}", "file:///var/lib/kubejury/results"),
    job_images=("ghcr.io/kubejury/kubejury:*",),
    claims=("kubejury-results",),
    storage_endpoints=("http://minio.minio:9000",),
    node_selector_keys=("nvidia.com/gpu.product",),
)


def paths(problems: list[Any]) -> list[str]:
    return [p.path for p in problems]


def run_with(namespace: str = "team-a", **spec: Any) -> dict[str, Any]:
    """A run of ``namespace`` the policy can read: it parses, so an empty list of policy problems
    means admitted, not unparsed."""
    spec.setdefault("benchmark", "s3://evals/team-a/bench.jsonl")
    spec.setdefault("storage", {"uri": "s3://evals/team-a"})
    body = build_evalrun(namespace=namespace, **spec)
    parse_evalrun(body)
    return body


# ------------------------------------------------------------- finding 1: the dangerous-flag check


@pytest.mark.parametrize(
    "args",
    [
        [" --trust-remote-code"],
        ["--trust-remote-code "],
        ["\t--trust-remote-code"],
        ["--trust_remote_code"],
        ["--download_dir=/x"],
        ["--config", "/tmp/flags.yaml"],
        ["--tool-parser-plugin", "/tmp/plugin.py"],
        ["--trust-remote"],
        ["--Trust-Remote-Code"],
        ["--max-num-seqs", "8", "other/positional-model"],
        ["--max-num-seqs 8 --trust-remote-code"],
    ],
)
def test_a_vllm_server_flag_outside_the_allow_list_is_refused_in_every_spelling(args: list[str]) -> None:
    body = run_with(models=[model_entry("a", runtime="vllm", extraArgs=args)])
    problems = policy_problems(body, CHART_LIKE)
    assert [p for p in paths(problems) if p.startswith("spec.models[0].extraArgs")], args
    assert all("security.allowedServerFlags" in p.message for p in problems), problems


@pytest.mark.parametrize(
    "args",
    [
        [" --path", "/"],
        ["--slot-save-path=/results"],
        ["--model", "/var/lib/kubejury/results/other/model.gguf"],
        ["-m", "/etc/passwd"],
        ["--hf-repo", "someone/else"],
        ["--lora", "/tmp/x"],
        ["--log-file", "/results/x"],
        ["--chat-template-file", "/var/run/secrets/kubernetes.io/serviceaccount/token"],
        ["--api-key-file", "/x"],
    ],
)
def test_a_llamacpp_server_flag_outside_the_allow_list_is_refused(args: list[str]) -> None:
    body = run_with(
        models=[
            model_entry(
                "a", source="hf://org/a-gguf", runtime="llamacpp", quantization="Q4_K_M", extraArgs=args
            )
        ]
    )
    assert "spec.models[0].extraArgs[0]" in paths(policy_problems(body, CHART_LIKE)), args


def test_allowed_tuning_flags_pass_in_both_runtimes_with_their_values() -> None:
    body = run_with(
        models=[
            model_entry("a", runtime="vllm", extraArgs=["--max-num-seqs", "64", "--enforce-eager"]),
            model_entry(
                "b",
                source="hf://org/b-gguf",
                runtime="llamacpp",
                quantization="Q4_K_M",
                extraArgs=["--threads", "8", "--cont-batching", "-ngl", "20", "--seed=-1"],
            ),
        ],
        judges=[model_entry("j", runtime="vllm", extraArgs=["--max-num-batched-tokens=8192"])],
    )
    assert policy_problems(body, CHART_LIKE) == []


def test_the_chart_may_add_a_flag_and_then_every_spelling_of_it_is_that_flag() -> None:
    policy = TenantPolicy(server_flags=("--trust-remote-code",))
    for spelling in ("--trust-remote-code", " --trust-remote-code", "--trust_remote_code"):
        body = build_evalrun(models=[model_entry("a", extraArgs=[spelling])])
        assert policy_problems(body, policy) == [], spelling


def test_the_flag_check_reads_the_args_exactly_as_they_are_rendered() -> None:
    rendered = parse_evalrun(build_evalrun(models=[model_entry("a", extraArgs=[" --seed\t", " 7 "])]))
    assert rendered.spec.models[0].extra_args == ["--seed", "7"]
    assert server_arg_problems("vllm", rendered.spec.models[0].extra_args, ()) == []


# ---------------------------------------------- finding 2: the storage endpoint is the chart's to list


def test_a_storage_endpoint_the_chart_does_not_list_is_refused_naming_the_chart_value() -> None:
    body = run_with(storage={"uri": "s3://evals/team-a", "endpointUrl": "http://attacker.example:9000"})
    problems = policy_problems(body, CHART_LIKE)
    assert paths(problems) == ["spec.storage.endpointUrl"]
    assert "security.storageEndpoints" in problems[0].message


def test_a_listed_storage_endpoint_passes_in_any_case_or_with_a_trailing_slash() -> None:
    for url in ("http://minio.minio:9000", "http://Minio.minio:9000/"):
        body = run_with(storage={"uri": "s3://evals/team-a", "endpointUrl": url})
        assert policy_problems(body, CHART_LIKE) == [], url


def test_the_policy_reads_the_allowed_endpoints_and_selector_keys_from_the_chart_environment() -> None:
    policy = TenantPolicy.from_env(
        {
            "KUBEJURY_ALLOWED_STORAGE_ENDPOINTS": '["http://minio:9000"]',
            "KUBEJURY_ALLOWED_NODE_SELECTOR_KEYS": '["nvidia.com/gpu.product"]',
        }
    )
    assert policy.storage_endpoints == ("http://minio:9000",)
    assert policy.node_selector_keys == ("nvidia.com/gpu.product",)


# --------------------------------- finding 3: benchmark and model sources read with the chart's identity


@pytest.mark.parametrize(
    "storage",
    [
        {"uri": "s3://evals/team-a"},
        # A Secret named by the run proves nothing: the chart's own storage Secret, one without AWS
        # keys (the ambient identity then signs) or a file:// run whose Jobs get no keys at all.
        {"uri": "s3://evals/team-a", "credentialsSecretRef": {"name": "kubejury-storage"}},
        {"uri": "s3://evals/team-a", "credentialsSecretRef": {"name": "hf-token"}},
        {"uri": "file:///var/lib/kubejury/results", "credentialsSecretRef": {"name": "mine"}},
    ],
)
def test_an_s3_benchmark_outside_the_allowed_roots_is_refused_whatever_secret_the_run_names(
    storage: dict[str, Any],
) -> None:
    body = run_with(benchmark="s3://other-team-bucket/questions.jsonl", storage=storage)
    problems = policy_problems(body, CHART_LIKE)
    assert paths(problems) == ["spec.benchmark.uri"]
    assert "security.storageRoots" in problems[0].message


def test_an_s3_model_source_outside_the_roots_is_refused_even_with_a_credentials_secret() -> None:
    body = run_with(
        models=[model_entry("a", source="s3://other-team-bucket/w")],
        storage={"uri": "s3://evals/team-a", "credentialsSecretRef": {"name": "kubejury-storage"}},
    )
    assert paths(policy_problems(body, CHART_LIKE)) == ["spec.models[0].source"]


@pytest.mark.parametrize(
    "url",
    ["http://minio.minio:9000/?x=@evil", "http://minio.minio:9000#@evil", "http://user@minio.minio:9000"],
)
def test_a_listed_endpoint_with_a_query_fragment_or_user_is_not_the_listed_endpoint(url: str) -> None:
    body = run_with(storage={"uri": "s3://evals/team-a", "endpointUrl": url})
    assert paths(policy_problems(body, CHART_LIKE)) == ["spec.storage.endpointUrl"]


def test_a_kubelet_variable_reference_in_server_args_is_refused() -> None:
    """The kubelet expands ``$(VAR)`` in a container's args: ``$(HF_TOKEN)`` would put the token
    into the server's command line and logs."""
    body = run_with(
        models=[model_entry("a", runtime="vllm", extraArgs=["--tool-call-parser", "$(HF_TOKEN)"])]
    )
    assert paths(policy_problems(body, CHART_LIKE)) == ["spec.models[0].extraArgs[1]"]


@pytest.mark.parametrize("runtime", ["ollama", "openai"])
def test_server_args_on_a_runtime_that_takes_none_are_refused(runtime: str) -> None:
    source = "ollama://qwen3:8b" if runtime == "ollama" else "https://api.example.com/v1"
    body = run_with(
        models=[model_entry("a", source=source, runtime=runtime, extraArgs=["--trust-remote-code"])]
    )
    assert paths(policy_problems(body, CHART_LIKE)) == ["spec.models[0].extraArgs"]


def test_an_s3_model_source_outside_the_allowed_roots_is_refused_in_any_case() -> None:
    for source in ("s3://other-bucket/weights", "S3://other-bucket/weights", " s3://other-bucket/w"):
        body = run_with(models=[model_entry("a", source=source)])
        assert paths(policy_problems(body, CHART_LIKE)) == ["spec.models[0].source"], source
    inside = run_with(models=[model_entry("a", source="s3://evals/team-a/weights")])
    assert policy_problems(inside, CHART_LIKE) == []


def test_a_file_benchmark_must_be_under_an_allowed_root_too() -> None:
    body = run_with(benchmark="file:///etc/kubejury/questions.jsonl")
    assert paths(policy_problems(body, CHART_LIKE)) == ["spec.benchmark.uri"]


# ---------------------------------------------------- finding 4: claims in another case or with a space


@pytest.mark.parametrize("source", ["PVC://victim-claim/m", "Pvc://victim-claim/m", " pvc://victim-claim/m"])
def test_a_pvc_source_in_any_case_or_with_a_space_is_checked_against_the_allowed_claims(source: str) -> None:
    body = run_with(models=[model_entry("a", source=source)])
    problems = policy_problems(body, CHART_LIKE)
    assert paths(problems) == ["spec.models[0].source"]
    assert "victim-claim" in problems[0].message


def test_snake_case_keys_do_not_skip_the_policy() -> None:
    body = run_with(
        models=[model_entry("a", extra_args=["--trust-remote-code"])],
        storage={"uri": "file:///var/lib/kubejury/results", "persistent_volume_claim": "victim"},
    )
    assert sorted(paths(policy_problems(body, CHART_LIKE))) == [
        "spec.models[0].extraArgs[0]",
        "spec.storage.persistentVolumeClaim",
    ]


# --------------------------------------------------- finding 5: which node labels a spec may select


def test_a_node_selector_key_the_chart_does_not_list_is_refused() -> None:
    body = run_with(
        models=[model_entry("a", nodeSelector={"dedicated": "team-b", "nvidia.com/gpu.product": "H100"})]
    )
    problems = policy_problems(body, CHART_LIKE)
    assert paths(problems) == ["spec.models[0].nodeSelector.dedicated"]
    assert "security.allowedNodeSelectorKeys" in problems[0].message


# ------------------------------------------------------- finding 6: percent-encoding in file roots


@pytest.mark.parametrize(
    "uri",
    [
        "file:///var/lib/kubejury/results/%2e%2e/elsewhere",
        "file:///var/lib/kubejury/results/%2E%2E/%2e%2e/etc",
        "file:///var/lib/kubejury/results/team-a%2f..%2f..",
    ],
)
def test_a_percent_encoded_file_root_is_refused(uri: str) -> None:
    body = run_with(storage={"uri": uri})
    assert "spec.storage.uri" in paths(policy_problems(body, CHART_LIKE)), uri
