"""Predictive capacity: per-pool demand history, seasonal forecasts, backtests.

Pure numpy, no I/O: callers hand in a demand series and read back quantile forecasts.
"""
