"""Hand-written training loops, as a user would write them from the PyTorch tutorials.

``bench fidelity`` times the suite's strategies against these, side by side, so that anyone
can check that the harness adds nothing of its own to the numbers it reports.
"""
