"""strategies/step_memory.py: bytes by kind and the total at the moment a step holds the most."""

from __future__ import annotations

import pytest

import models
from models.backward_peaks import backward_peaks
from models.sizes import output_bytes_per_sample, parameter_counts, saved_bytes_per_sample
from strategies.step_memory import BlockHeld, at_largest_moment, by_kind, moments_by_kind, with_total

MIB = 2**20


def backward_moments(blocks: list[BlockHeld]) -> list[float]:
    """Bytes held at each of ``moments_by_kind``, every kind together."""
    return [sum(moment.values()) for moment in moments_by_kind(blocks)]


def test_bytes_by_kind_total_the_larger_of_the_forward_and_the_step_peaks() -> None:
    # fp32 state in elements: 10 parameters, 10 gradients, 20 optimizer states; activations and temporaries in bytes.
    # The temporaries (DDP's buckets) are held beside both moments.
    assert by_kind(10, 10, 20, 100, temporaries=8) == {
        "parameters": 40, "gradients": 40, "optimizer_state": 80, "activations": 100, "temporaries": 8,
        "total": 40 + 80 + 8 + max(100, 40),
    }
    assert by_kind(10, 10, 20, 10)["total"] == 40 + 80 + max(10, 40)


def test_the_total_is_one_moment_s_not_every_kind_s_peak_summed() -> None:
    # Measured by MemTracker on the small transformer, ddp x2 (MiB): the kinds' own peaks sum to 97; the step
    # peaked at 81.4, in its loss's backward.
    kinds = {"parameters": 14 * MIB, "gradients": 14 * MIB, "optimizer_state": 14 * MIB,
             "activations": 37 * MIB, "temporaries": 18 * MIB}
    assert with_total(kinds)["total"] == (14 + 14 + 18 + max(37, 14)) * MIB
    # a small model whose activations are nothing beside its state peaks at the step, as the mlp measured
    assert with_total({**kinds, "activations": MIB})["total"] == (14 + 14 + 14 + 18) * MIB
    # a kind of neither moment (the batch) counts in both
    assert with_total({**kinds, "other": 3 * MIB})["total"] == with_total(kinds)["total"] + 3 * MIB


def test_the_backward_walks_block_by_block_from_the_loss() -> None:
    # Two blocks: 100 bytes of gradients each; the first saves 50 and outputs 10, the second (with the loss) saves
    # 30 and outputs 20 logits.
    blocks = [BlockHeld(100, 50, 10), BlockHeld(100, 30, 20)]
    assert backward_moments(blocks) == [
        80,  # the forward's end: every saved activation
        80 + 20,  # the loss's backward: its saved log-probabilities freed, two gradients of their size held
        100 + 80 + 10,  # the last block's: its gradients made beside every activation, its input's gradient
        200 + 50,  # the first block's: every gradient, its own activations still held
        200,  # the optimizer step
    ]
    kinds = by_kind(50, 50, 50, 80)  # 200 bytes of each fp32 kind
    assert at_largest_moment(kinds, blocks)["total"] == 200 + 200 + 250
    assert kinds["total"] == 200 + 200 + 200  # the forward's end and the step alone miss the first block's backward


def test_the_small_cnn_peaks_in_its_backward_as_the_tracker_measured() -> None:
    # MemTracker on the 2-core VM, single, batch 32 (MiB): 138.78 in the fourth block's backward, of which 0.42 the
    # batch and buffers. The forward's end and the optimizer step alone gave 127.96.
    spec = models.build_model("cnn", "small", "batch")
    blocks = [BlockHeld(4 * n, 32 * saved, 32 * out) for n, saved, out in zip(
        parameter_counts(spec.blocks), saved_bytes_per_sample(spec), output_bytes_per_sample(spec), strict=True)]
    state = 2 * sum(4 * n for n in parameter_counts(spec.blocks))  # parameters and momentum
    moments = backward_moments(blocks)
    assert (state + max(moments)) / MIB == pytest.approx(138.78 - 0.42, rel=0.005)
    # the largest is a block's backward: after the forward's end and the loss's, before the optimizer step
    assert moments.index(max(moments)) not in (0, 1, len(moments) - 1)


def test_the_temporaries_are_the_largest_moments_with_each_blocks_backward_counted() -> None:
    # MemTracker, small transformer, DDP on 2 ranks (8 samples a rank; MiB): 17.62 of temporaries at the step's
    # peak, the buckets' 14.12 and the last layer's backward's 3.50. Each block's moment at its edges (no counted
    # peaks) gives the buckets alone, 20% under.
    spec = models.build_model("transformer", "small", "batch")
    counts = parameter_counts(spec.blocks)
    held = [BlockHeld(4 * n, 8 * saved, 8 * out) for n, saved, out in zip(
        counts, saved_bytes_per_sample(spec), output_bytes_per_sample(spec), strict=True)]
    kinds = by_kind(sum(counts), sum(counts), sum(counts), sum(h.saved for h in held), temporaries=4 * sum(counts))
    counted = at_largest_moment(kinds, held, backward_peaks(spec, (8, 16)), 8)
    assert counted["temporaries"] / MIB == pytest.approx(17.62, rel=0.05)
    assert at_largest_moment(kinds, held)["temporaries"] / MIB == pytest.approx(14.12, rel=0.01)
    assert counted["total"] / MIB == pytest.approx(81.43, rel=0.02)


def test_a_block_s_counted_peak_halves_under_bf16_as_its_activations_do() -> None:
    from models.backward_peaks import BackwardPeak, Bytes
    from strategies.step_memory import peak_bytes

    peak = BackwardPeak(Bytes(0.0, 100.0), Bytes(40.0, 0.0), Bytes(8.0, 10.0))
    assert peak_bytes(peak, 2) == (200.0, 40.0, 28.0)
    assert peak_bytes(peak, 2, element_bytes=2) == (100.0, 20.0, 14.0)
