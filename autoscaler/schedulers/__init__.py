"""Clients of the cluster schedulers (Slurm, Kubernetes): the signal readers read through
them and the drainers act through them."""
