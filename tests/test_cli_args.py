"""bench/harness/cli_args.py: a config dataclass turned into documented flags, and flags back into the dataclass."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

import pytest

from bench.harness.cli_args import (
    OneLineParser,
    add_config_arguments,
    comma_list,
    config_from_args,
    config_to_argv,
    fail,
    field_docs,
    flag_fields,
)


@dataclass(frozen=True)
class Pipe:
    microbatches: int = 1
    """Micro-batches per global batch."""
    schedule: str = "gpipe"
    """Which schedule drives the stages."""


@dataclass(frozen=True)
class Toy:
    lr: float = 0.01
    """Learning rate."""
    label: str | None = None
    """A name for the run (default: none)."""
    compile: bool = False
    """torch.compile every block."""
    pipe: Pipe = field(default_factory=Pipe)


def _parser(**defaults: object) -> argparse.ArgumentParser:
    parser = OneLineParser(prog="toy")
    add_config_arguments(parser, Toy, defaults=defaults)
    return parser


def test_each_field_is_a_flag_documented_by_its_docstring_sections_flattened() -> None:
    assert [f.name for f in flag_fields(Toy)] == ["lr", "label", "compile", "microbatches", "schedule"]
    assert field_docs(Toy) == {"lr": "Learning rate.", "label": "A name for the run (default: none).",
                               "compile": "torch.compile every block.",
                               "microbatches": "Micro-batches per global batch.",
                               "schedule": "Which schedule drives the stages."}
    helps = {a.dest: a.help for a in _parser(microbatches=4)._actions if a.dest != "help"}
    assert helps["lr"] == "Learning rate. (default: 0.01)"
    assert helps["microbatches"] == "Micro-batches per global batch. (default: 4)"  # this command's own default
    assert helps["label"] == "A name for the run (default: none)."  # None: the help says what it stands for


def test_a_config_becomes_flags_and_the_flags_rebuild_it_exactly() -> None:
    config = Toy(lr=0.5, label="first", compile=True, pipe=Pipe(microbatches=8, schedule="1f1b"))
    argv = config_to_argv(config)
    assert argv == ["--lr", "0.5", "--label", "first", "--compile", "--microbatches", "8", "--schedule", "1f1b"]
    assert config_from_args(Toy, _parser().parse_args(argv)) == config
    assert config_to_argv(Toy()) == ["--lr", "0.01", "--no-compile", "--microbatches", "1", "--schedule", "gpipe"]
    assert config_from_args(Toy, _parser(microbatches=4).parse_args([])) == Toy(pipe=Pipe(microbatches=4))


def test_a_comma_list_parses_each_item_and_names_what_it_expected() -> None:
    ints = comma_list(int)
    assert ints("1,2,4") == (1, 2, 4) and ints("8,") == (8,)
    with pytest.raises(argparse.ArgumentTypeError, match=r"^expected a comma-separated list of int, got '1,x'$"):
        ints("1,x")


def test_a_bad_command_line_is_one_line_and_exit_code_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        _parser().parse_args(["--lr", "fast"])
    assert exited.value.code == 2
    assert capsys.readouterr().err == "toy: error: argument --lr: invalid float value: 'fast'\n"
    with pytest.raises(SystemExit) as exited:
        fail("bench run", "--devices 3 is odd")
    assert exited.value.code == 2 and capsys.readouterr().err == "bench run: error: --devices 3 is odd\n"
