"""strategies/errors.py: a ConfigError carries the one line the user sees, and is caught as a ValueError."""

from __future__ import annotations

import pytest

from strategies.errors import ConfigError
from strategies.precision import check_precision


def test_a_config_error_carries_its_one_line_and_nothing_else() -> None:
    error = ConfigError("--devices 3 is not a power of 2")
    assert str(error) == "--devices 3 is not a power of 2" and error.args == ("--devices 3 is not a power of 2",)


def test_code_that_catches_value_errors_catches_a_refusal_with_its_message() -> None:
    # A caller's `except ValueError` sees a refusal, its one line intact.
    with pytest.raises(ValueError) as caught:
        check_precision("fp64", "cpu")
    assert type(caught.value) is ConfigError
    assert str(caught.value) == "unknown precision 'fp64'; choose from auto, fp32, tf32, bf16, fp16"
