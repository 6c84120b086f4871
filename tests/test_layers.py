"""The house in layers: each package imports only the layers below it, and no module imports itself round a cycle.

    commands      bench/cli.py, bench/__main__.py, bench/commands/   parsing and printing, one module per command
    experiments   bench/experiments/   sweep, verify, fidelity, the planner
    predictor     bench/predict/       the cost sources and the calibration; reports/ sits beside it
    harness       bench/harness/       config, launch, processes, the run, records, failures, stats
    library       strategies/, models/

reports/ reads records and statistics (the harness) and the registry, never the predictor or the experiments;
the one way up to it is the report command. Every import counts, inside functions too: a cycle hidden in a
function is still a cycle a reader has to hold.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.helpers.cli import ROOT

LAYERS = {"strategies": 0, "models": 0, "bench.harness": 1, "bench.predict": 2, "reports": 2,
          "bench.experiments": 3, "bench.commands": 4, "bench.cli": 4, "bench.__main__": 4, "bench": 4}
"""Each package's height, the longest matching prefix deciding (``bench`` itself: its entry points)."""
BESIDE = {("reports", "bench.predict"), ("bench.predict", "reports")}
"""Packages at one height that must not import each other."""


def layer(module: str) -> str | None:
    """The package of ``LAYERS`` ``module`` belongs to, or None for a module outside the house (torch, ...)."""
    matches = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    return max(matches, key=len) if matches else None


def modules(root: Path) -> dict[str, Path]:
    found = {}
    for top in ("bench", "reports", "strategies", "models"):
        for path in sorted((root / top).rglob("*.py")):
            name = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
            found[name] = path
    return found


def imports(path: Path, known: set[str]) -> set[str]:
    """The modules of ``known`` that ``path`` imports (``from a import b`` counts ``a.b`` where it is a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}
    return found & known


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import of a higher layer, or of a package beside its own, as ``importer -> imported``."""
    wrong = []
    for importer, targets in graph.items():
        own = layer(importer)
        for target in targets:
            theirs = layer(target)
            if own is None or theirs is None or own == theirs:
                continue
            if LAYERS[theirs] > LAYERS[own] or (own, theirs) in BESIDE:
                wrong.append(f"{importer} -> {target}")
    return sorted(wrong)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    found = modules(Path(ROOT))
    return {name: imports(path, set(found)) - {name} for name, path in found.items()}


def test_no_layer_imports_one_above_it(graph: dict[str, set[str]]) -> None:
    assert upward(graph) == []
    assert "reports.build" in graph["bench.commands.report"]  # the scan sees the one way up that is allowed


def test_no_modules_import_each_other(graph: dict[str, set[str]]) -> None:
    assert cycles(graph) == []


def test_every_module_of_the_house_has_a_layer(graph: dict[str, set[str]]) -> None:
    assert [name for name in graph if layer(name) is None] == []


def test_the_checks_catch_an_upward_import_and_a_cycle() -> None:
    broken = {"bench.harness.records": {"bench.predict.costs"}, "bench.predict.costs": {"bench.harness.records"},
              "reports.load": {"bench.predict.costs"}, "bench.harness.config": {"strategies.mesh"}}
    assert upward(broken) == ["bench.harness.records -> bench.predict.costs", "reports.load -> bench.predict.costs"]
    assert cycles(broken) == [["bench.harness.records", "bench.predict.costs"]]
