"""Trace-driven simulator: replays GPU cluster traces through the same ``decide()`` the
service runs, against baselines (static, Cluster-Autoscaler-like, target tracking) and an
oracle lower bound. Entry points: :func:`autoscaler.sim.run.run_all` and
``gpu-autoscaler simulate``.
"""
