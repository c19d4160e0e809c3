"""Real services run locally: patched moto, Prometheus (with promtool rule backfill), Slurm."""
