"""gpu-autoscaler: keeps a cloud GPU fleet the right size."""

__version__ = "0.1.0"
