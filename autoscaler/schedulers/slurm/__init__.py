"""Slurm: running its commands (squeue, sinfo, scontrol, sacct) and parsing their output."""
