"""The experiments: sweeps, verification, fidelity, the planner; they run the harness, and price with the predictor."""
