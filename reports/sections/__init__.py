"""The report's sections, one module each: its table, figures, CSVs and words. reports/build.py lists them in order."""
