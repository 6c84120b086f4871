"""What every figure shares: one colour per strategy, the EMULATED mark, axes that fit the data, the CSV beside it.

Each section draws its own figures (reports/sections/); this module only keeps them alike."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, cast

import matplotlib

matplotlib.use("Agg")  # files only: reports are made on headless machines

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.colors import ListedColormap  # noqa: E402
from matplotlib.transforms import offset_copy  # noqa: E402

from strategies import STRATEGIES

EMULATED_NOTE = "EMULATED: several devices shared one CPU; this is not GPU scaling"
OVERSUBSCRIBED_NOTE = "OVERSUBSCRIBED: more processes than CPU cores"
IDEAL: dict[str, Any] = {"color": "black", "linestyle": "--", "linewidth": 1}
"""The ideal-scaling line: black, never one of the strategies' colours."""

# tab10 without its grey (index 7), which reads as a reference line: one fixed colour per strategy, so a
# strategy has the same colour in every figure of every report.
# get_cmap is typed to return a Colormap, and a ListedColormap's colors as ArrayLike | ColorType: tab10 is a
# ListedColormap of ten RGB tuples.
_TAB10 = cast(Sequence[tuple[float, float, float]], cast(ListedColormap, plt.get_cmap("tab10")).colors)
_ORDER = tuple(STRATEGIES)  # the registry's order: single, dp, ddp, zero1, fsdp, tp, mp, pp, hybrid
_COLOURS = [c for i, c in enumerate(_TAB10) if i != 7]
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def colour(strategy: str) -> tuple[float, float, float]:
    """The strategy's colour in every figure; a strategy not listed gets one from its name."""
    index = _ORDER.index(strategy) if strategy in _ORDER else len(_ORDER) + sum(map(ord, strategy))
    return _COLOURS[index % len(_COLOURS)]


def strategy_of(variant: str) -> str:
    """``pp (gpipe, m=4)`` -> ``pp``."""
    return variant.split(" ", 1)[0]


def in_order(variants: Iterable[object]) -> list[str]:
    """Variants in the strategies' fixed order (the legend's), then by name."""
    known = {name: i for i, name in enumerate(_ORDER)}
    return sorted({str(v) for v in variants}, key=lambda v: (known.get(strategy_of(v), len(_ORDER)), v))


def marker(variant: str, variants: list[str]) -> str:
    """Variants of one strategy share its colour and differ by marker."""
    same = [v for v in variants if strategy_of(v) == strategy_of(variant)]
    return _MARKERS[same.index(variant) % len(_MARKERS)] if variant in same else "o"


def warning_for(runs: pd.DataFrame) -> str:
    """The mark every figure built from emulated or oversubscribed devices carries."""
    notes = []
    if "emulated" in runs and runs["emulated"].any():
        notes.append(EMULATED_NOTE)
    if "oversubscribed" in runs and runs["oversubscribed"].any():
        notes.append(OVERSUBSCRIBED_NOTE)
    return "; ".join(notes)


def device_axis(ax: Axes, devices: list[int]) -> None:
    """Devices on x: log2 only where there are more than two counts to spread (a log over two points
    only hides the numbers); ticks at the counts measured."""
    counts = sorted({int(d) for d in devices})
    if len(counts) > 2:
        ax.set_xscale("log", base=2)
    ax.set_xticks(counts, [str(c) for c in counts])
    ax.minorticks_off()
    ax.set_xlabel("devices")


def panels(count: int, width: float = 4.2, height: float = 3.4) -> tuple[plt.Figure, list[Axes]]:
    """A row of ``count`` axes (one per model panel)."""
    fig, axes = plt.subplots(1, max(count, 1), figsize=(width * max(count, 1) + 1.6, height), squeeze=False)
    return fig, list(axes[0])


def finish(fig: plt.Figure, title: str, data: pd.DataFrame, path: Path, flags: pd.DataFrame | None = None) -> Path:
    """Titles and saves the figure, with the data it draws beside it as CSV (same name, ``.csv``).

    ``data`` is what the figure plots, no more; ``flags`` (default ``data``) says whether it is emulated."""
    data.to_csv(path.with_suffix(".csv"), index=False)
    # Title and warning sit above the axes at fixed offsets in points, whatever the figure's height.
    warning = warning_for(data if flags is None else flags)
    above = offset_copy(fig.transFigure, fig=fig, y=22 if warning else 6, units="points")
    fig.text(0.5, 1.0, title, ha="center", va="bottom", fontsize=12, transform=above)
    if warning:
        note = offset_copy(fig.transFigure, fig=fig, y=6, units="points")
        fig.text(0.5, 1.0, warning, ha="center", va="bottom", color="firebrick", fontsize=10, weight="bold",
                 transform=note)
    fig.savefig(path, dpi=100, bbox_inches="tight")
    plt.close(fig)
    return path


def legend_outside(fig: plt.Figure, axes: list[Axes], title: str) -> None:
    """One legend for the row, right of the last panel, its entries deduplicated."""
    seen: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            seen.setdefault(label, handle)
    if seen:
        axes[-1].legend(list(seen.values()), list(seen), title=title, loc="upper left", bbox_to_anchor=(1.02, 1),
                        fontsize=8, title_fontsize=8)
