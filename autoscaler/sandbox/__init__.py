"""A local stack for the demo and tests: patched moto, Prometheus, a synthetic DCGM
exporter, Slurm, SSH test hosts in network namespaces, fake Kubernetes and ECS APIs.

Production code never imports this package; the sandbox plugs into the seams DESIGN.md
names (address resolver, file_sd targets, endpoint URLs).
"""
