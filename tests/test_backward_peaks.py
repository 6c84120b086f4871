"""models/backward_peaks.py: what each block holds at its own backward's largest moment, counted on meta."""

from __future__ import annotations

import pytest

import models
from models.backward_peaks import BackwardPeak, Bytes, backward_peaks

MIB = 2**20


def test_a_line_through_two_counts_reads_either_exactly_and_never_below_zero() -> None:
    line = Bytes(fixed=100.0, per_sample=10.0)
    assert (line.at(0), line.at(4)) == (100.0, 140.0)
    assert Bytes(fixed=-50.0, per_sample=10.0).at(2) == 0.0


def test_the_small_transformers_layers_peak_as_their_mlp_makes_its_gradients() -> None:
    # Tracked in the target sweeps (small transformer, FSDP ZeRO-3 on 4 and 2 ranks: 4 and 8 samples a rank): the
    # last layer's backward peaked holding 2.25 and 3.50 MiB of temporaries beside the head's scatter buffer. A
    # Linear's weight gradient (1 MiB, fixed) and its input's (the MLP's hidden, per sample).
    spec = models.build_model("transformer", "small", "batch")
    peaks = backward_peaks(spec, (4, 8))
    assert len(peaks) == len(spec.blocks) and all(isinstance(p, BackwardPeak) for p in peaks)
    last_layer = peaks[-2]
    assert last_layer.temporaries.at(4) / MIB == pytest.approx(2.25, abs=0.01)
    assert last_layer.temporaries.at(8) / MIB == pytest.approx(3.50, abs=0.01)
    assert last_layer.gradients.at(8) == 0  # its own gradients not yet made: the peak is its backward's start


def test_the_small_cnns_fourth_block_peaks_after_freeing_its_activations() -> None:
    # MemTracker on one device, batch 32: the step's peak, in the fourth block's backward, held 1.78 MiB of
    # temporaries; most of the block's gradients were made and its own activations freed.
    spec = models.build_model("cnn", "small", "batch")
    fourth = backward_peaks(spec, (16, 32))[3]
    assert fourth.temporaries.at(32) / MIB == pytest.approx(1.78, abs=0.01)
    assert fourth.activations.at(32) < 0.01 * MIB and fourth.gradients.at(32) > 0.5 * MIB
