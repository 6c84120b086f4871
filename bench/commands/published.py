"""``bench predict --published FILE``: the command around bench/predict/published.py."""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.harness.cli_args import fail
from bench.harness.paths import check_writable
from bench.harness.records import append_record
from strategies import ConfigError


def published_main(args: argparse.Namespace, default_out: str) -> int:
    """``--published FILE``: one record per row, the table, the median and largest |error|."""
    from bench.predict.published import prediction_records, print_table, read_rows

    if args.hardware:
        fail("bench predict", "--published takes each row's own gpu; give it without --hardware")
    out = args.out or default_out
    try:
        rows = read_rows(Path(args.published))
        check_writable(Path(out))
    except (OSError, ValueError, ConfigError) as exc:
        fail("bench predict", f"--published {args.published}: {getattr(exc, 'strerror', None) or exc}")
    if not rows:
        fail("bench predict", f"--published {args.published} has no rows")
    records = prediction_records(rows, args.published)
    for record in records:
        append_record(out, record)
    print_table(records)
    print(f"records -> {out}")
    return 0
