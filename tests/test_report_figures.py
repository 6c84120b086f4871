"""What every figure shares (reports/figures.py): one colour per strategy, readable device axes."""

from __future__ import annotations

import matplotlib.pyplot as plt
import pytest

from reports import figures

STRATEGIES = ("single", "dp", "ddp", "zero1", "fsdp", "tp", "mp", "pp", "hybrid")


def test_each_strategy_has_its_own_colour_and_none_is_the_ideal_lines_grey_or_black() -> None:
    # Old: each figure let seaborn colour its variants in order, and pp's grey was the ideal line's grey.
    colours = [figures.colour(s) for s in STRATEGIES]
    assert len(set(colours)) == len(STRATEGIES)
    grey = plt.get_cmap("tab10").colors[7]
    assert grey not in colours and (0.0, 0.0, 0.0) not in colours and figures.IDEAL["color"] == "black"
    assert figures.colour(figures.strategy_of("pp (gpipe, m=4)")) == figures.colour("pp")  # variants share it


@pytest.mark.parametrize(("devices", "scale"), [([1, 2], "linear"), ([1, 2, 2], "linear"), ([1, 2, 4], "log")])
def test_a_log_axis_only_over_more_than_two_device_counts(devices: list[int], scale: str) -> None:
    # Old: log2 axes over the two device counts 1 and 2.
    fig, ax = plt.subplots()
    figures.device_axis(ax, devices)
    assert ax.get_xscale() == scale and [t.get_text() for t in ax.get_xticklabels()] == \
        [str(d) for d in sorted(set(devices))]
    plt.close(fig)
