"""``python -m bench explain dp``: nn.DataParallel's scatter sizes, pinned and checked against torch.chunk."""

from __future__ import annotations

import pytest
import torch

from bench.cli import main
from bench.commands.explain import explain_dp, loader_batch_sizes, split_lines
from strategies.shards import chunk_sizes


@pytest.mark.parametrize(
    ("batch", "devices", "expected"),
    [
        (30, 3, [10, 10, 10]),  # the tutorial's full batches
        (10, 3, [4, 4, 2]),  # its last batch of 100 % 30
        (10, 8, [2, 2, 2, 2, 2]),  # only 5 of 8 replicas work
        (2, 3, [1, 1]),  # a batch smaller than the device count
        (7, 4, [2, 2, 2, 1]),
        (9, 4, [3, 3, 3]),  # ceil(9 / 4) = 3 leaves the fourth device idle
        (1, 4, [1]),
        (5, 1, [5]),
        (0, 3, [0, 0, 0]),
    ],
)
def test_chunk_sizes_pinned(batch: int, devices: int, expected: list[int]) -> None:
    assert chunk_sizes(batch, devices) == expected


def test_chunk_sizes_agree_with_torch_chunk_everywhere() -> None:
    # nn.DataParallel's scatter falls back to Tensor.chunk(len(devices), dim=0) (comm.cpp).
    for batch in range(0, 65):
        for devices in range(1, 17):
            torch_sizes = [c.size(0) for c in torch.empty(batch, 1).chunk(devices, dim=0)]
            assert chunk_sizes(batch, devices) == torch_sizes, (batch, devices)


def test_loader_batches_keep_the_last_partial_batch() -> None:
    assert loader_batch_sizes(100, 30) == [30, 30, 30, 10]
    assert loader_batch_sizes(60, 30) == [30, 30]
    assert loader_batch_sizes(10, 30) == [10]
    expected = [len(b) for b in torch.utils.data.DataLoader(list(range(100)), batch_size=30)]
    assert loader_batch_sizes(100, 30) == expected


def test_the_tutorial_case_line_by_line() -> None:
    assert split_lines(3, 30, 100) == [
        "  batch 0:   30 samples -> 10/10/10  (3 replicas work)",
        "  batch 1:   30 samples -> 10/10/10  (3 replicas work)",
        "  batch 2:   30 samples -> 10/10/10  (3 replicas work)",
        "  batch 3:   10 samples -> 4/4/2  (3 replicas work)",
    ]
    assert split_lines(8, 10, 10) == ["  batch 0:   10 samples -> 2/2/2/2/2  (5 replicas work; 3 of 8 devices idle)"]


def test_explain_names_the_five_steps_and_says_what_this_machine_shows() -> None:
    text = "\n".join(explain_dp(3, 30, 100, gpus=0))
    steps = ["1. scatter", "2. replicate", "3. parallel forward/backward", "4. gather", "5. reduce and update"]
    positions = [text.index(step) for step in steps]
    assert positions == sorted(positions)
    assert "No GPU here" in text
    assert "fewer than 3" in "\n".join(explain_dp(3, 30, 100, gpus=2))


def test_cli_prints_the_split(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "dp", "--devices", "3", "--batch-size", "30", "--dataset-size", "100"]) == 0
    out = capsys.readouterr().out
    assert "10 samples -> 4/4/2" in out and out.count("30 samples -> 10/10/10") == 3


@pytest.mark.parametrize(
    ("args", "message"),
    [(["--devices", "0"], "--devices must be at least 1, got 0"),
     (["--batch-size", "-1"], "--batch-size must be at least 1, got -1"),
     (["--dataset-size", "0"], "--dataset-size must be at least 1, got 0")],
)
def test_bad_numbers_are_one_line(args: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["explain", "dp", *args])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err == f"bench explain: error: {message}\n"


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs to observe replicas")
def test_replicas_see_the_computed_sizes_on_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    devices = torch.cuda.device_count()
    text = "\n".join(explain_dp(devices, 3 * devices + 1, 3 * devices + 1, gpus=devices))
    sizes = chunk_sizes(3 * devices + 1, devices)
    for d, size in enumerate(sizes):
        assert f"cuda:{d} [{size}, 5]" in text
