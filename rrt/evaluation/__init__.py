"""Measuring rewrites: the paper's metrics, the report and the non-neural baselines."""
