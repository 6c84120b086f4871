"""``single``: the whole model on one device. The reference every other strategy must match."""

from __future__ import annotations

from torch import nn

from models.spec import ModelSpec
from strategies.base import Launch, Strategy, Topology


class SingleDevice(Strategy):
    """Plain training on one device: the baseline of every speed-up and every equivalence check."""

    name = "single"
    is_reference = True
    launch = Launch.IN_PROCESS
    description = "whole model on one device (the reference)"
    max_devices = 1

    def prepare(self, spec: ModelSpec, topo: Topology) -> nn.Module:
        return spec.blocks.to(topo.devices[0])
