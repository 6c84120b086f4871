"""The README and docs/ as a user reads them: every `bench` command in them parses with the CLI's own parser,
the main job's commands are tox's and hand each other the files they write, and the Python snippets run."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import torch

from bench.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_VALUE = re.compile(r"\$\(\([^)]*\)\)|\$\{?\w+\}?")
"""Shell expansions in the Slurm example (`$((SLURM_NNODES * 4))`, `"$SLURM_NODEID"`): parsed as the number 2."""


def code_blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.DOTALL)


def command_lines(block: str) -> list[str]:
    """The block's commands, continuation lines joined and comments dropped."""
    joined = block.replace("\\\n", " ")
    lines = [line.split(" # ")[0].strip() for line in joined.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]


def bench_argv(line: str) -> list[str] | None:
    """The arguments after `-m bench` (python or torchrun), or None for a line that runs no bench command."""
    if "-m bench" not in line:
        return None
    words = shlex.split(SHELL_VALUE.sub("2", line))
    for i in range(len(words) - 1):
        if words[i] == "-m" and words[i + 1] == "bench":
            return words[i + 2:]
    return None


def bench_commands() -> list[tuple[str, str]]:
    found = []
    for page in PAGES:
        for block in code_blocks(page, "bash"):
            for line in command_lines(block):
                if bench_argv(line) is not None:
                    found.append((page.name, line))
    return found


def test_the_pages_hold_bench_commands() -> None:
    pages = {page for page, _ in bench_commands()}
    assert {"README.md", "predictor.md", "strategies.md", "gpus-and-clusters.md"} <= pages


@pytest.mark.parametrize(("page", "line"), bench_commands())
def test_every_bench_command_in_the_docs_parses(page: str, line: str, capsys: pytest.CaptureFixture[str]) -> None:
    argv = bench_argv(line)
    assert argv is not None
    try:
        build_parser().parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{page}: `{line}` does not parse (exit {exc.code}): {capsys.readouterr().err.strip()}")


def test_a_misspelt_flag_in_a_page_would_be_caught() -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["run", "--strategy", "ddp", "--device", "2x"])
    assert exc.value.code == 2


def main_job_lines() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## What the main job does", 1)[1]
    return command_lines(code_blocks_of(section)[0])


def code_blocks_of(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL)


def test_the_readme_main_job_is_what_tox_runs() -> None:
    tox = (ROOT / "tox.ini").read_text().split("[testenv:main]", 1)[1].split("\n[", 1)[0]
    commands = " ".join(tox.split("commands =", 1)[1].replace("\\\n", " ").replace("{posargs}", "").split())
    for line in main_job_lines():
        assert " ".join(line.split()) in commands, f"README's `{line}` is not in tox -e main"
    assert len(main_job_lines()) == commands.count("python -m bench")


def test_the_main_job_reports_the_files_its_commands_write() -> None:
    parser = build_parser()
    written: set[Path] = set()
    for line in main_job_lines():
        argv = bench_argv(line)
        assert argv is not None
        args = parser.parse_args(argv)
        if args.command == "report":
            missing = [str(path) for path in args.results if Path(path) not in written]
            assert not missing, f"bench report reads {missing}, which no earlier command writes ({sorted(written)})"
        else:
            written.add(Path(args.out))


def test_the_checkpoint_snippet_loads_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from bench.harness.checkpoint import save_checkpoint
    from models import build_model

    (snippet,) = [block for block in code_blocks(ROOT / "docs" / "running.md", "python") if "load_state_dict" in block]
    saved = build_model("mlp", "tiny").blocks.state_dict()
    monkeypatch.chdir(tmp_path)
    save_checkpoint("model.pt", saved, model="mlp", preset="tiny", strategy="ddp")
    namespace: dict[str, object] = {}
    exec(snippet, namespace)  # noqa: S102 - the page's own code, as a user would paste it
    model = namespace["model"]
    assert isinstance(model, torch.nn.Module)
    loaded = model.state_dict()
    assert loaded.keys() == saved.keys()
    assert all(loaded[k].equal(saved[k]) for k in saved)


def allowed_test_files(module: Path) -> set[str]:
    """The test files docs/layout.md lets a module's tests live in: ``test_<module>.py``; for reports/ also
    ``test_report_<module>.py``; for a command ``test_<command>_cli.py``; for a module of a package (models/,
    bench/experiments/<package>/, reports/sections/) the package's file."""
    stem, parent = module.stem, module.parent
    names = {f"test_{stem}.py"}
    if module.parts[0] == "reports":
        names |= {f"test_report_{stem}.py", f"test_report_{parent.name}.py"}
    if module.parts[:2] == ("bench", "commands"):
        names.add(f"test_{stem}_cli.py")
    if parent.name == "models" or parent.parent.name == "experiments":
        names.add(f"test_{parent.name}.py")
    return names


def modules() -> list[Path]:
    return [path.relative_to(ROOT) for top in ("bench", "strategies", "models", "reports")
            for path in sorted((ROOT / top).rglob("*.py")) if path.name not in ("__init__.py", "__main__.py")]


def test_every_module_has_a_test_file_named_for_it_as_the_layout_page_says() -> None:
    have = {path.name for path in (ROOT / "tests").glob("test_*.py")}
    assert [str(module) for module in modules() if not allowed_test_files(module) & have] == []


def test_a_module_without_its_test_file_would_be_caught() -> None:
    have = {path.name for path in (ROOT / "tests").glob("test_*.py")} - {"test_zero1.py"}
    assert [str(module) for module in modules() if not allowed_test_files(module) & have] == ["strategies/zero1.py"]
