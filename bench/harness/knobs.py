"""Training knobs that change the model before a strategy places it: channels-last, activation
checkpointing, torch.compile.

Each acts on every block of ``spec.blocks`` in place, before the strategy splits or wraps them,
so every strategy gets them the same way (per block is also per pipeline stage), and the state
dict keeps its keys: a checkpoint written with the knobs loads without them, and back.
"""

from __future__ import annotations

import torch
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

from bench.harness.config import RunConfig
from models.spec import ModelSpec


def apply_model_knobs(spec: ModelSpec, config: RunConfig) -> None:
    """Applies ``config``'s model knobs to ``spec.blocks`` (after the FLOPs are counted: MFU counts
    the model's FLOPs, not the recomputation that checkpointing adds)."""
    if config.knobs.channels_last:
        spec.blocks.to(memory_format=torch.channels_last)  # the 4-D weights; inputs follow in the runner
    for i, block in enumerate(spec.blocks):
        if config.knobs.activation_checkpointing:
            # Non-reentrant checkpointing (the recommended kind); the wrapper's state-dict hooks
            # drop its own prefix, so parameter names stay the model's.
            block = checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT)
        if config.knobs.compile:
            # Per block, as torchtitan compiles per transformer block: one small graph reused by
            # every strategy and stage, and the module keeps its parameter names.
            block.compile()
        spec.blocks[i] = block
