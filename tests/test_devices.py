"""GPU names as torch reports them, matched to the data sheet of their own part (bench/harness/devices.py)."""

from __future__ import annotations

import pytest
import torch

from bench.harness.devices import PEAK_FLOPS, gpu_part, peak_flops_per_s

NAMES = [
    ("NVIDIA H100 80GB HBM3", "H100 SXM"),
    ("NVIDIA H100 SXM5 80GB", "H100 SXM"),
    ("NVIDIA H100 PCIe", "H100 PCIe"),
    ("NVIDIA H100 NVL", "H100 NVL"),
    ("NVIDIA H200", "H200 SXM"),
    ("NVIDIA H200 NVL", "H200 NVL"),
    ("NVIDIA GH200 480GB", "GH200"),
    ("NVIDIA A100-SXM4-40GB", "A100"),
    ("NVIDIA A100-SXM4-80GB", "A100"),
    ("NVIDIA A100-PCIE-40GB", "A100"),
    ("NVIDIA A100 80GB PCIe", "A100"),
    ("NVIDIA A10", None),
    ("NVIDIA H20", None),
    ("NVIDIA H800", None),
    ("NVIDIA GeForce RTX 4090", None),
]

BF16_TFLOPS = {"H100 SXM": 989.5, "H100 PCIe": 756, "H100 NVL": 835.5, "H200 SXM": 989.5, "H200 NVL": 835.5,
               "GH200": 989.5, "A100": 312}


@pytest.mark.parametrize(("name", "part"), NAMES)
def test_each_name_finds_its_own_part(name: str, part: str | None) -> None:
    assert gpu_part(name) == part


@pytest.mark.parametrize(("name", "part"), NAMES)
def test_the_peak_read_for_a_cuda_device_is_its_parts(name: str, part: str | None,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # Before matching by part, a substring match gave H100 PCIe/NVL, H200 NVL and GH200 the SXM peak.
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: name)
    peak = peak_flops_per_s(torch.device("cuda", 0), "bf16")
    assert peak == (None if part is None else BF16_TFLOPS[part] * 1e12)


def test_every_part_has_every_precision_and_the_cpu_none() -> None:
    assert all(set(peaks) == {"fp32", "tf32", "bf16", "fp16"} for peaks in PEAK_FLOPS.values())
    assert peak_flops_per_s(torch.device("cpu"), "fp32") is None
