"""What each GPU product can do per second: memory bandwidth and dense tensor throughput.

Why this module exists: ``kubejury plan --estimate`` turns tokens into GPU-hours with a roofline
(:mod:`kubejury.placement.roofline`), and a roofline needs two numbers per GPU — bytes per second
from memory and floating-point operations per second at the precision the model computes in. They
come from the vendors' datasheets (named per entry and listed with their addresses in
``docs/placement.md``). Datasheets print tensor figures *with 2:4 structured sparsity*; inference
runs dense, so every figure here is the dense one (half the printed sparse figure).

Products are found by the GPU Feature Discovery product label (``nvidia.com/gpu.product``, e.g.
``NVIDIA-H100-80GB-HBM3``) by the longest matching key, as :func:`kubejury.placement.gpu_nodes.known_gpu`
does for memory and compute capability. A product missing here gets no estimate (the estimate says
so) rather than a guess.
"""

from __future__ import annotations

from dataclasses import dataclass

TERA = 1e12
GIGA = 1e9


@dataclass(frozen=True)
class GpuSpec:
    """Datasheet figures of one GPU product (dense tensor throughput, no sparsity)."""

    name: str
    memory_gb: float  # per GPU, as the datasheet states it (decimal GB)
    bandwidth_gb_s: float  # memory bandwidth, GB/s
    bf16_tflops: float  # dense BF16 (FP16 where the product has no BF16: T4)
    fp8_tflops: float | None  # dense FP8; None: no FP8 tensor cores
    fp4_tflops: float | None  # dense FP4 (NVFP4/MXFP4); None: no FP4 tensor cores
    source: str  # the datasheet the figures come from (docs/placement.md lists its address)

    @property
    def bandwidth(self) -> float:
        """Memory bandwidth in bytes per second."""
        return self.bandwidth_gb_s * GIGA

    def peak_flops(self, precision: str) -> float:
        """Dense tensor FLOP/s at ``precision`` ("bf16", "fp8", "fp4"), falling back to the
        next wider precision the product has (an FP8 model on an A100 computes in BF16)."""
        if precision == "fp4" and self.fp4_tflops is not None:
            return self.fp4_tflops * TERA
        if precision in ("fp4", "fp8") and self.fp8_tflops is not None:
            return self.fp8_tflops * TERA
        return self.bf16_tflops * TERA


_H100_SHEET = "NVIDIA H100 Tensor Core GPU datasheet"
_H200_SHEET = "NVIDIA H200 Tensor Core GPU datasheet"
_A100_SHEET = "NVIDIA A100 Tensor Core GPU datasheet"
_BLACKWELL_SHEET = "NVIDIA GB200 NVL72 and HGX B200 specifications (per-GPU figures)"

#: Known products: lower-case substring of the GFD product label → datasheet figures.
#: Dense figures are half the datasheets' sparse ones.
GPU_SPECS: dict[str, GpuSpec] = {
    # Hopper (CC 9.0): FP8, no FP4
    "h100": GpuSpec("H100 SXM 80GB", 80, 3350, 989.5, 1979, None, _H100_SHEET),
    "h100-80gb-hbm3": GpuSpec("H100 SXM 80GB", 80, 3350, 989.5, 1979, None, _H100_SHEET),
    "h100-sxm": GpuSpec("H100 SXM 80GB", 80, 3350, 989.5, 1979, None, _H100_SHEET),
    "h100-pcie": GpuSpec("H100 PCIe 80GB", 80, 2000, 756.5, 1513, None, _H100_SHEET),
    "h100-nvl": GpuSpec("H100 NVL 94GB", 94, 3900, 835.5, 1670.5, None, _H100_SHEET),
    "h200": GpuSpec("H200 SXM 141GB", 141, 4800, 989.5, 1979, None, _H200_SHEET),
    "h200-nvl": GpuSpec("H200 NVL 141GB", 141, 4800, 835.5, 1670.5, None, _H200_SHEET),
    # H800: the export variant of the H100 SXM (same compute and memory, reduced NVLink)
    "h800": GpuSpec("H800 SXM 80GB", 80, 3350, 989.5, 1979, None, "NVIDIA H800 Tensor Core GPU datasheet"),
    "gh200": GpuSpec(
        "GH200 96GB", 96, 4000, 989.5, 1979, None, "NVIDIA GH200 Grace Hopper Superchip datasheet"
    ),
    # Ampere (CC 8.0 / 8.6): BF16 only
    "a100": GpuSpec("A100 40GB", 40, 1555, 312, None, None, _A100_SHEET),
    "a100-sxm4-40gb": GpuSpec("A100 SXM 40GB", 40, 1555, 312, None, None, _A100_SHEET),
    "a100-pcie-40gb": GpuSpec("A100 PCIe 40GB", 40, 1555, 312, None, None, _A100_SHEET),
    "a100-sxm4-80gb": GpuSpec("A100 SXM 80GB", 80, 2039, 312, None, None, _A100_SHEET),
    "a100-80gb": GpuSpec("A100 PCIe 80GB", 80, 1935, 312, None, None, _A100_SHEET),
    "a100-80gb-pcie": GpuSpec("A100 PCIe 80GB", 80, 1935, 312, None, None, _A100_SHEET),
    # A800: the export variant of the A100 80GB (same compute and memory, reduced NVLink)
    "a800": GpuSpec("A800 80GB", 80, 2039, 312, None, None, "NVIDIA A800 Tensor Core GPU datasheet"),
    "a30": GpuSpec("A30 24GB", 24, 933, 165, None, None, "NVIDIA A30 Tensor Core GPU datasheet"),
    "a10": GpuSpec("A10 24GB", 24, 600, 125, None, None, "NVIDIA A10 Tensor Core GPU datasheet"),
    # AWS's A10G: same memory and bandwidth as the A10; we assume the A10's tensor figures.
    "a10g": GpuSpec("A10G 24GB", 24, 600, 125, None, None, "NVIDIA A10 Tensor Core GPU datasheet"),
    "a40": GpuSpec("A40 48GB", 48, 696, 149.7, None, None, "NVIDIA A40 datasheet"),
    "rtx-a6000": GpuSpec("RTX A6000 48GB", 48, 768, 154.8, None, None, "NVIDIA RTX A6000 datasheet"),
    # Ada (CC 8.9): FP8, no FP4
    "rtx-6000-ada": GpuSpec(
        "RTX 6000 Ada 48GB", 48, 960, 364.2, 728.5, None, "NVIDIA RTX 6000 Ada Generation datasheet"
    ),
    "l4": GpuSpec("L4 24GB", 24, 300, 121, 242.5, None, "NVIDIA L4 Tensor Core GPU datasheet"),
    "l40": GpuSpec("L40 48GB", 48, 864, 181, 362, None, "NVIDIA L40 GPU datasheet"),
    "l40s": GpuSpec("L40S 48GB", 48, 864, 362.05, 733, None, "NVIDIA L40S GPU datasheet"),
    # Blackwell (CC 10.x / 12.0): FP8 and FP4
    "b200": GpuSpec("B200 180GB", 180, 7700, 2250, 4500, 9000, _BLACKWELL_SHEET),
    "gb200": GpuSpec("GB200 186GB", 186, 8000, 2500, 5000, 10000, _BLACKWELL_SHEET),
    # 4,000 FP4 "AI TOPS" with sparsity → 2,000 dense FP4; FP8 and BF16 each half the next.
    "rtx-pro-6000-blackwell": GpuSpec(
        "RTX PRO 6000 Blackwell Server Edition 96GB",
        96,
        1597,
        500,
        1000,
        2000,
        "NVIDIA RTX PRO 6000 Blackwell Server Edition datasheet",
    ),
    # Turing (CC 7.5): FP16 tensor cores, no BF16 (vLLM does not use it; llama.cpp does)
    # Volta (CC 7.0): FP16 tensor cores (no sparsity, no BF16)
    "v100": GpuSpec("V100 SXM2 32GB", 32, 900, 125, None, None, "NVIDIA V100 Tensor Core GPU datasheet"),
    "t4": GpuSpec("T4 16GB", 16, 320, 65, None, None, "NVIDIA T4 Tensor Core GPU datasheet"),
}


def gpu_spec(product: str | None) -> GpuSpec | None:
    """The datasheet figures of a GFD product label (longest matching key), or ``None``."""
    if not product:
        return None
    text = product.lower().replace(" ", "-")
    matches = [key for key in GPU_SPECS if key in text]
    if not matches:
        return None
    return GPU_SPECS[max(matches, key=len)]
