"""Strategy-free checkpoints: the whole model's ``state_dict`` keyed like ``ModelSpec.blocks``.

A checkpoint written under any strategy (replicas unwrapped, pipeline stages merged) loads
under any other, and is read with ``weights_only=True``: loading runs no pickled code.
"""

from __future__ import annotations

from pathlib import Path

import torch

CHECKPOINT_FORMAT = "bench-checkpoint-1"


class CheckpointError(ValueError):
    """A checkpoint that cannot be used; the message is one line."""


def save_checkpoint(path: str | Path, state: dict[str, torch.Tensor], model: str, preset: str, strategy: str) -> None:
    """Writes to a temporary file first, so that a crash never leaves a half-written checkpoint behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {"format": CHECKPOINT_FORMAT, "model": model, "preset": preset, "saved_by": strategy,
               "state_dict": {k: v.detach().cpu() for k, v in state.items()}}
    partial = path.with_name(path.name + ".partial")
    torch.save(payload, partial)
    partial.replace(path)


def load_checkpoint(path: str | Path, model: str | None = None, preset: str | None = None) -> dict[str, torch.Tensor]:
    """The state dict of a checkpoint written by ``save_checkpoint``, checked against the model it is for."""
    path = Path(path)
    try:
        payload = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"checkpoint {path} does not exist") from None
    except Exception as exc:  # truncated zip, a pickle with code in it, not a torch file at all
        reason = type(exc).__name__
        raise CheckpointError(f"checkpoint {path} cannot be read ({reason}); truncated or foreign?") from None
    if not isinstance(payload, dict) or payload.get("format") != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path} is not a checkpoint written by this suite (format {CHECKPOINT_FORMAT})")
    for key, want in (("model", model), ("preset", preset)):
        if want is not None and payload[key] != want:
            raise CheckpointError(f"checkpoint {path} is for {key} {payload[key]!r}, not {want!r}")
    return payload["state_dict"]
