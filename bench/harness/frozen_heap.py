"""Imported last by every fork server the suite starts (bench/harness/ranks.py's ``PRELOADED``): what the server
imported (torch, the suite, torch._dynamo) is moved out of the garbage collector's reach before it forks anything.

A forked process then collects only what it made itself. Not frozen, each collection walked the hundreds of
thousands of objects the imports made: a run's end collects before its process group goes
(strategies/distributed.py), 0.16 s of a core each on the 2-core VM, on every rank (a tenth of a tiny run's
time in the tests' runs of ten strategies in one group). Frozen in the server, not in each child: freezing
writes to every object's header, which the children would each copy, page by page, had they done it.
"""

import gc

gc.freeze()
