"""GPU datasheet figures: found by GPU Feature Discovery product labels, dense, with precision fallbacks."""

from __future__ import annotations

import pytest

from kubejury.placement.gpu_specs import GPU_SPECS, gpu_spec

#: Product labels as GFD writes them → the product they must resolve to.
LABELS = {
    "NVIDIA-H100-80GB-HBM3": "H100 SXM 80GB",
    "NVIDIA-H100-PCIe": "H100 PCIe 80GB",
    "NVIDIA-H100-NVL": "H100 NVL 94GB",
    "NVIDIA-H200": "H200 SXM 141GB",
    "NVIDIA-H200-NVL": "H200 NVL 141GB",
    "NVIDIA-GH200-480GB": "GH200 96GB",
    "NVIDIA-A100-SXM4-40GB": "A100 SXM 40GB",
    "NVIDIA-A100-SXM4-80GB": "A100 SXM 80GB",
    "NVIDIA-A100-PCIE-40GB": "A100 PCIe 40GB",
    "NVIDIA-A100-80GB-PCIe": "A100 PCIe 80GB",
    "NVIDIA-A10": "A10 24GB",
    "NVIDIA-A10G": "A10G 24GB",
    "NVIDIA-L4": "L4 24GB",
    "NVIDIA-L40": "L40 48GB",
    "NVIDIA-L40S": "L40S 48GB",
    "NVIDIA-B200": "B200 180GB",
    "NVIDIA-GB200": "GB200 186GB",
    "NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition": "RTX PRO 6000 Blackwell Server Edition 96GB",
    "Tesla-T4": "T4 16GB",
}


@pytest.mark.parametrize(("label", "name"), sorted(LABELS.items()))
def test_gfd_labels_find_their_product(label: str, name: str) -> None:
    spec = gpu_spec(label)
    assert spec is not None and spec.name == name


def test_unknown_products_get_no_figures() -> None:
    assert gpu_spec("NVIDIA-Imaginary-9000") is None
    assert gpu_spec(None) is None
    assert gpu_spec("") is None


def test_dense_figures_are_half_the_datasheets_sparse_ones() -> None:
    h100 = gpu_spec("NVIDIA-H100-80GB-HBM3")
    assert h100 is not None
    assert h100.peak_flops("fp8") == pytest.approx(3958e12 / 2)  # datasheet: 3,958 TFLOPS with sparsity
    assert h100.peak_flops("bf16") == pytest.approx(1979e12 / 2)
    assert h100.bandwidth == pytest.approx(3.35e12)


def test_precisions_a_product_lacks_fall_back_to_the_next_wider() -> None:
    a100 = gpu_spec("NVIDIA-A100-SXM4-80GB")
    assert a100 is not None
    assert (
        a100.peak_flops("fp8") == a100.peak_flops("fp4") == a100.peak_flops("bf16") == pytest.approx(312e12)
    )
    h200 = gpu_spec("NVIDIA-H200")
    assert h200 is not None and h200.peak_flops("fp4") == h200.peak_flops("fp8")  # Hopper: no FP4
    b200 = gpu_spec("NVIDIA-B200")
    assert b200 is not None
    assert (
        b200.peak_flops("fp4")
        == pytest.approx(2 * b200.peak_flops("fp8"))
        == pytest.approx(4 * b200.peak_flops("bf16"))
    )


def test_every_entry_is_consistent() -> None:
    for key, spec in GPU_SPECS.items():
        assert spec.bandwidth_gb_s > 0 and spec.bf16_tflops > 0 and spec.memory_gb > 0, key
        if spec.fp4_tflops is not None:
            assert spec.fp8_tflops is not None and spec.fp4_tflops > spec.fp8_tflops, key
        if spec.fp8_tflops is not None:
            assert spec.fp8_tflops > spec.bf16_tflops, key
        assert spec.source, key


def test_products_placement_knows_have_figures() -> None:
    """Every product the node parser knows (``KNOWN_GPUS``) can be estimated, except those whose
    dense figures no datasheet we cite gives yet."""
    from kubejury.placement.gpu_nodes import KNOWN_GPUS

    without_figures = {"b300"}
    missing = {key for key in KNOWN_GPUS if gpu_spec(f"NVIDIA-{key}") is None} - without_figures
    assert not missing
