"""``python -m bench``: see bench/cli.py."""

import os
import sys

from bench.disturbance import open_window
from bench.processes import die_with_torchrun

if "LOCAL_RANK" in os.environ:
    # A torchrun worker: tie its life to torchrun's before the seconds it takes to import torch.
    die_with_torchrun()
open_window()  # the account of other processes' CPU time starts here (bench/disturbance.py)

from bench.cli import main  # noqa: E402

sys.exit(main())
