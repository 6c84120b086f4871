"""``python -m bench report RESULTS... --out DIR``: the command over ``reports.build``."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.harness.cli_args import fail
from bench.harness.paths import writable_folder
from bench.harness.records import RecordError
from strategies import ConfigError


def check_output_folder(out: Path) -> None:
    """Raises RecordError, before anything is read or written, for an --out the report cannot be written in."""
    if out.exists() and not out.is_dir():
        raise RecordError(f"--out {out}: a file, not a folder")
    try:
        writable_folder(out)
    except ConfigError as exc:
        raise RecordError(f"--out {out}: {exc}") from None


def add_parser(commands: argparse._SubParsersAction) -> None:
    parser = commands.add_parser("report", help="figures and a Markdown + HTML report from records")
    parser.add_argument("results", nargs="+", type=Path, help="results .jsonl files (or pytest-benchmark .json)")
    parser.add_argument("--out", type=Path, default=Path("results/report"), help="folder (default: results/report)")


def main(args: argparse.Namespace) -> int:
    # Imported here: seaborn and matplotlib take a second or more, which every bench process (each
    # rank of every run) would otherwise pay.
    from reports.build import report_from_files

    try:
        check_output_folder(args.out)
        for path in args.results:
            if not path.is_file():
                raise RecordError(f"{path}: no such results file")
        written = report_from_files(args.results, args.out)
    except RecordError as exc:
        fail("bench report", str(exc))
    print(f"report: {written[0]} and {written[1]} ({len(written) - 2} figures)")
    return 0
