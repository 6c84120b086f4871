"""What every bench process imports: each rank of every run starts one, so what it does not use costs
seconds per run (torchvision 2 s, seaborn and matplotlib 1 s, FSDP2's baseline script 1 s on the 2-core VM)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers.cli import ROOT

LEFT_FOR_WHERE_THEY_ARE_USED = ("torchvision", "seaborn", "matplotlib", "bench.experiments.baselines.plain_fsdp")


@pytest.mark.launches
def test_the_cli_leaves_torchvision_plotting_and_fsdp_baselines_to_the_commands_that_use_them() -> None:
    probe = f"import sys, bench.cli; print([m for m in {LEFT_FOR_WHERE_THEY_ARE_USED!r} if m in sys.modules])"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def test_a_cnn_still_builds_its_torchvision_resnet() -> None:
    import torch

    import models

    spec = models.build_model("cnn", "tiny", "group")
    assert type(spec.blocks[1]).__name__ == "BasicBlock" and "torchvision" in type(spec.blocks[1]).__module__
    with torch.device("meta"):  # ResNet-50's shapes, no memory
        assert type(models.build_model("cnn", "large").blocks[1]).__name__ == "Bottleneck"
