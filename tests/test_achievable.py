"""bench/predict/achievable.py: a published configuration's step at achievable speed, its images/s and memory."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from bench.predict.achievable import (
    ALLOCATOR_RESERVE,
    INPUT_IMAGES_PER_S_PER_NODE,
    Mesh,
    StepEstimate,
    elementwise_bytes_per_token,
    images_per_s,
    transformer_step,
)
from bench.predict.profiles import GPUS, SHARES
from models.decoder import DecoderDims, build_decoder

DIMS = DecoderDims(layers=2, width=64, heads=4, kv_heads=2, ffn=128, ffn_kind="swiglu", norm="rms", positions="rope",
                   vocab=100, seq_len=16)
ONE_NODE = Mesh(gpus=8, gpus_per_node=8, dp=8, dp_shard=1, micro_batch=32, grad_accum=2, precision="amp-fp16",
                checkpointing="none", compile=False)


def test_images_per_s_is_every_replicas_batch_per_step_up_to_what_each_nodes_input_pipeline_feeds() -> None:
    def step(seconds: float) -> StepEstimate:
        return StepEstimate(seconds, seconds, 0.0, 0.0, {})

    assert images_per_s(step(0.1), ONE_NODE) == pytest.approx(8 * 32 * 2 / 0.1)  # 5,120: below the input's limit
    assert images_per_s(step(0.01), ONE_NODE) == INPUT_IMAGES_PER_S_PER_NODE  # 51,200 computed, one node feeds less
    two_nodes = dataclasses.replace(ONE_NODE, gpus=16, dp=16)
    assert images_per_s(step(0.01), two_nodes) == 2 * INPUT_IMAGES_PER_S_PER_NODE


def test_a_decoders_elementwise_bytes_count_its_norms_adds_rope_and_mlp_in_bf16() -> None:
    # two norms (2 x 2d), two residual adds (2 x 3d), rope on q and k (2 x (d + kv)), swiglu 5f; 2 bytes each
    assert elementwise_bytes_per_token(DIMS) == 2 * (4 * 64 + 6 * 64 + 2 * (64 + 32) + 5 * 128) == 2944
    gelu = dataclasses.replace(DIMS, ffn_kind="gelu", positions="learned")  # no rope; gelu reads and writes f once
    assert elementwise_bytes_per_token(gelu) == 2 * (4 * 64 + 6 * 64 + 2 * 128) == 1792


def test_fsdp_over_more_ranks_shards_the_fp32_state_and_one_rank_exposes_no_communication() -> None:
    gpu = GPUS["h200"]
    alone = dataclasses.replace(ONE_NODE, dp=1, dp_shard=1, micro_batch=2, grad_accum=1, precision="bf16")
    sharded = dataclasses.replace(alone, dp_shard=8)
    one, eight = transformer_step(DIMS, alone, gpu, None), transformer_step(DIMS, sharded, gpu, None)
    with torch.device("meta"):
        parameters = sum(p.numel() for p in build_decoder(DIMS).parameters())
    # 16 bytes a parameter (fp32 weights, gradients, Adam's two moments), an eighth of them on each of 8 ranks
    assert one.memory_bytes - eight.memory_bytes == pytest.approx(16 * parameters * (1 - 1 / 8) * ALLOCATOR_RESERVE)
    assert one.compute_s == eight.compute_s
    assert one.exposed_comm_s == pytest.approx(0.0, abs=1e-15) and eight.exposed_comm_s > 0
    twice = transformer_step(DIMS, dataclasses.replace(alone, grad_accum=2), gpu, None)
    assert twice.compute_s == pytest.approx(2 * one.compute_s)  # two micro-batches a step
    assert one.efficiencies["matmul"] == pytest.approx(SHARES["hopper"].matmul * 64 / (64 + 2500))
