"""GPU and fabric profiles: data-sheet figures, and the few achievable shares fitted to published results.

Every constant names its source. "train.csv" is bench/predict/data/train.csv (a copy of
../shared/published/train.csv, rows named by ``id``); a share fitted there says which rows it was read
from. Nothing here is keyed on a model, a row or an ``id``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.harness.devices import PEAK_FLOPS
from bench.predict.nccl import GB, Link

TB = 1e12
GIB = 2**30

# NVLink 4 + NVSwitch, 8 x H100: nccl-tests all_reduce_perf busbw 383 GB/s at 128 MB, 465 at 1 GB, 474-477 at
# 4 GB (NVIDIA/nccl-tests issue 290, in ../shared/published/README.md). 480 GB/s, a half-bandwidth chunk of
# 3 MB (the per-GPU chunk, S/8) and 2 us a ring hop put the three points within 1% (tests/test_nccl.py).
NVLINK4 = Link("NVLink4/NVSwitch (8 x H100/H200)", 480 * GB, 3e6, 2e-6,
               "nccl-tests issue 290: 8 x H100 all_reduce busbw 383/465/476 GB/s at 128 MB/1 GB/4 GB")
# NVLink 3, 8 x A100: 600 GB/s bidirectional per GPU (A100 data sheet), 300 one way; the same achievable share
# of the one-way figure as NVLink 4's ring without in-switch reduction (~370 of 450 GB/s: NCCL's published
# H100 ring figures are 0.8 of it) gives 240 GB/s. No A100 nccl-tests figure is in the published README.
NVLINK3 = Link("NVLink3/NVSwitch (8 x A100)", 240 * GB, 3e6, 2e-6,
               "A100 data sheet 600 GB/s bidirectional; 0.8 of one way as NVLink4's ring achieves")
# InfiniBand NDR 400 Gb/s per GPU: 50 GB/s line rate; NCCL's maintainers expect 46-48 GB/s per NIC
# (nccl-tests issue 290). The published 2-node figures (156 GB/s busbw default, 90 ring) are below what
# 8 NICs at 46 carry (368): the maintainers suspect that cluster was mistuned, so the NIC figure is used.
NDR_400 = Link("InfiniBand NDR 400 Gb/s per GPU", 46 * GB, 2e6, 5e-6,
               "nccl-tests issue 290: maintainers expect 46-48 GB/s per NDR NIC")
# RoCE 1600 Gb/s per node (llm-foundry's A100 sections): 200 GB/s per node, 25 per GPU of 8; NCCL over RoCE
# reaches about 0.9 of line rate as over InfiniBand (46 of 50 above).
ROCE_1600 = Link("RoCE 1600 Gb/s per node (200 Gb/s per GPU)", 22.5 * GB, 2e6, 8e-6,
                 "llm-foundry README: 1600 Gb/s RoCE per node; 0.9 of line rate as NDR above")
FABRICS: dict[str, Link | None] = {"none": None, "rdma-400g-per-gpu": NDR_400, "roce-1600g-per-node": ROCE_1600,
                                   "unstated": NDR_400}
"""train.csv's ``inter_node``; ``unstated`` (llm-foundry's H100 section) taken as the H100 clusters' usual NDR."""


@dataclass(frozen=True)
class Gpu:
    """One GPU part: dense peaks, memory and its bandwidth, the NVLink it sits on, and its sources."""

    name: str
    peak_flops: dict[str, float]
    """Dense FLOP/s by compute precision (tf32, bf16, fp16, fp32)."""
    hbm_bytes_per_s: float
    memory_bytes: float
    architecture: str
    """ampere or hopper: the achievable shares below differ by architecture, not by part."""
    nvlink: Link
    source: str
    usable_bytes: float = field(default=0.0)
    """What the CUDA caching allocator can hand out (the part's memory less the driver's share)."""


AMPERE = PEAK_FLOPS["A100"]
HOPPER_SXM = PEAK_FLOPS["H100 SXM"]
# torchtitan's H100s: 96 GB HBM2e, capped at 500 W; ../shared/published/README.md puts its peak between the SXM
# (989.5 TFLOP/s bf16 dense, 700 W) and NVL (835.5, 350-400 W) parts: taken at the midpoint.
HOPPER_500W = {k: (v + PEAK_FLOPS["H100 NVL"][k]) / 2 for k, v in HOPPER_SXM.items()}

GPUS = {
    "a100-sxm-40gb": Gpu("A100 SXM 40GB", AMPERE, 1.555 * TB, 40 * GIB, "ampere", NVLINK3,
                         "NVIDIA A100 data sheet (dense; 1,555 GB/s HBM2)"),
    "a100-sxm-80gb": Gpu("A100 SXM 80GB", AMPERE, 2.039 * TB, 80 * GIB, "ampere", NVLINK3,
                         "NVIDIA A100 data sheet (dense; 2,039 GB/s HBM2e)"),
    "h100-sxm-80gb": Gpu("H100 SXM 80GB", HOPPER_SXM, 3.35 * TB, 80 * GIB, "hopper", NVLINK4,
                         "NVIDIA H100 SXM data sheet (dense; 3.35 TB/s HBM3)"),
    "h100-96gb-500w": Gpu("H100 96GB 500W", HOPPER_500W, 3.35 * TB, 96 * GIB, "hopper", NVLINK4,
                          "midpoint of the H100 SXM and NVL data sheets (dense), as ../shared/published/README.md "
                          "places torchtitan's 500 W part; HBM2e taken at the SXM's 3.35 TB/s"),
    "h200": Gpu("H200 SXM", HOPPER_SXM, 4.8 * TB, 141e9, "hopper", NVLINK4,
                "NVIDIA H200 data sheet (dense; 4.8 TB/s HBM3e, 141 GB)"),
}


MATMUL_HALF_WIDTH = 2500
"""The width at which a decoder's GEMMs reach half of ``Shares.matmul``: fitted, with the two ``matmul`` shares,
to train.csv's seven transformer throughput rows (widths 4096, 7168 and 8192; a grid over the three
constants, the largest |error| least); mpt-7b-fsdp8-h100 (d 4096) against mpt-70b-fsdp64-h100 (d 8192),
the same stack and GPU at two widths, is what sets it."""


@dataclass(frozen=True)
class Shares:
    """Achievable shares of a data-sheet figure, per architecture (what a kernel of each kind reaches)."""

    matmul: float
    """bf16/fp16 GEMMs of the dense peak, as the width d grows without bound (``matmul_at``)."""
    convolution_tf32: float
    """cuDNN convolutions in TF32 (ResNet-50 shapes, NCHW) of the TF32 peak."""
    convolution: float
    """cuDNN convolutions in fp16/bf16 (ResNet-50 shapes, NHWC) of the dense peak."""
    attention: float
    """FlashAttention forward+backward of the dense peak."""
    hbm: float
    """Memory-bound elementwise and normalisation kernels of the HBM bandwidth."""
    sources: tuple[str, ...]

    def matmul_at(self, width: int) -> float:
        """The share a decoder of width ``width`` reaches: GEMMs of K, N ~ d fill the GPU's waves and hide
        their memory traffic better as d grows, d / (d + MATMUL_HALF_WIDTH) of ``matmul``."""
        return self.matmul * width / (width + MATMUL_HALF_WIDTH)


SHARES = {
    "ampere": Shares(
        matmul=0.90, convolution_tf32=0.26, convolution=0.46, attention=0.55, hbm=0.70,
        sources=("matmul 0.90 x d/(d+2500): fitted to train.csv mpt-30b-fsdp128-a100-40gb, "
                 "mpt-70b-fsdp128-a100-40gb",
                 "attention 0.55: FlashAttention-2 fwd+bwd reaches 50-73% of A100's peak (Dao 2023, fig. 5)",
                 "convolution 0.46, convolution_tf32 0.26: fitted to train.csv dle-rn50-a100-1-amp, "
                 "dle-rn50-a100-1-tf32",
                 "hbm 0.70: assumed (eager BatchNorm/ReLU kernels reach 0.6-0.8 of HBM); the convolutions "
                 "fitted beside it")),
    "hopper": Shares(
        matmul=0.72, convolution_tf32=0.26, convolution=0.46, attention=0.38, hbm=0.75,
        sources=("matmul 0.72 x d/(d+2500): fitted to train.csv mpt-7b-fsdp8-h100, mpt-70b-fsdp64-h100, tt-l31-8b-*",
                 "attention 0.38: FlashAttention-2 reaches about 35% of H100's peak (Shah et al. 2024, FA3 paper)",
                 "convolution, convolution_tf32: Ampere's shares (no Hopper ResNet row in train.csv)",
                 "hbm 0.75: elementwise kernels reach 0.7-0.8 of H100's HBM3 bandwidth (assumed as Ampere's + 0.05)")),
}
