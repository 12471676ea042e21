"""Every model-server image the operator can run, pinned in one place with the reason for its version.

Why this module exists: an inference image is a compatibility decision — which model architectures
it can load, which GPUs and drivers it runs on — and a silent bump (or a stale pin) breaks a run
hours in, on the GPUs. The pins live here, once; :class:`~kubejury_operator.settings.WorkloadSettings`
takes its defaults from them, the Helm chart leaves ``inference.images.*`` empty unless an operator
overrides one (a mirror, a newer tag), and ``docs/chart.md`` lists this table (a unit test keeps the
two the same). The kubejury image itself (operator and Jobs) is the chart's ``appVersion``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class PinnedImage:
    """One pinned image: what it is for, the reference and why this version."""

    role: str
    reference: str
    reason: str


VLLM = PinnedImage(
    role="vLLM (safetensors, FP8, NVFP4, MXFP4 on GPUs)",
    reference="docker.io/vllm/vllm-openai:v0.19.1",
    reason=(
        "Every architecture of examples/evalrun-study.yaml is in vLLM's supported-models list: "
        "Qwen3.5 (Qwen3_5ForConditionalGeneration, full support since v0.17.0), Gemma 4 dense and MoE "
        "(Gemma4ForConditionalGeneration, v0.19.0 release notes: 'Full Google Gemma 4 architecture "
        "support including MoE'), GLM-4.7-Flash (Glm4MoeLiteForCausalLM), GPT-OSS, Llama 3.1 "
        "(Nemotron-70B), Qwen2 (calme-2.4-rys-78b), Mistral (Nemo), Qwen3, Gemma 3 and Phi-4 (Phi3ForCausalLM). "
        "v0.19.0 needs transformers>=5.5.0 for Gemma 4, which its image did not ship; v0.19.1 is the "
        "first release image with transformers v5 (vLLM's Gemma 4 recipe moved from the :gemma4 tag to "
        ":v0.19.1). It is the last line built on CUDA 12.9: from v0.20.0 the default image is CUDA 13.0, "
        "which needs an R580+ driver that many GPU node images do not have yet."
    ),
)

LLAMACPP_CPU = PinnedImage(
    role="llama.cpp server, CPU build (GGUF models placed on CPU nodes)",
    reference="ghcr.io/ggml-org/llama.cpp:server-b8648",
    reason=(
        "A build after Gemma 4 GGUF support landed (b8645 added Gemma 4; ggml-org's own apps moved to "
        "b8648 for it), so GGUFs of every family in the study load (Qwen3.5, GLM-4.7-Flash, Gemma 4, "
        "Mixtral, QwQ). Same build number as the CUDA image, so CPU and GPU placements run the same code."
    ),
)

LLAMACPP_CUDA = PinnedImage(
    role="llama.cpp server, CUDA build (GGUF models placed on GPU nodes)",
    reference="ghcr.io/ggml-org/llama.cpp:server-cuda-b8648",
    reason=(
        "The CUDA build of the same release as the CPU image: the CPU build ignores --n-gpu-layers, so a "
        "GPU placement would hold the GPU and compute on the CPU."
    ),
)

OLLAMA = PinnedImage(
    role="Ollama (GGUF models pulled by Ollama tag)",
    reference="docker.io/ollama/ollama:0.12.3",
    reason=(
        "Serves the study's Ollama tags (qwq:32b-q6_K, qwq:32b-q4_K_M, mixtral:8x7b-instruct-v0.1-q4_K_S) "
        "and reads OLLAMA_CONTEXT_LENGTH (the context the operator passes from maxModelLen) and "
        "PARAMETER num_ctx in a Modelfile; models newer than that release need a newer tag here."
    ),
)

ALL: tuple[PinnedImage, ...] = (VLLM, LLAMACPP_CPU, LLAMACPP_CUDA, OLLAMA)
