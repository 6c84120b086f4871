"""The commands' own modules: parsing and printing, over the experiments, the predictor and the report."""
