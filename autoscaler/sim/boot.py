"""Boot-to-READY time per path, as the simulator models it (each jittered by
``SimConfig.boot_jitter``). Each default names its source.

* cold (``SimConfig.boot_delay``, 240 s): a node from the base image, provisioning plus the
  whole bootstrap with the NVIDIA driver built for the running kernel. Red Hat measured GPU
  node provisioning on OpenShift with the driver built on the node against precompiled
  driver images: precompiled cut it "by about 50% (or 2 to 3 minutes)", so a cold GPU node
  takes 4-6 min ("How precompiled drivers improve NVIDIA GPU autoscaling on Red Hat
  OpenShift", redhat.com blog); the AKS node image build measured its in-boot DKMS compile
  at ~100 s (Azure/AgentBaker pull 8661). 240 s, the simulator's default since the first
  benchmark, is the low end of that range: every figure measured against it stays
  comparable.
* baked (``BAKED_BOOT_S``, 120 s): a node from the pool's baked image runs only the
  node-time part. Red Hat's measurement above: half of the cold time. (The sandbox's own
  ratio, benchmarks/README.md's warm row, is 0.72, but its cold node installs no driver:
  the ``gpu-hardware`` tasks are skipped without GPUs.)
* warm (``WARM_BOOT_S``, 67 s): a stopped, bootstrapped instance is started, rejoins its
  scheduler and passes the health check. AWS: warm pool instances "can be launched to serve
  traffic in as low as 30 seconds" (EC2 Auto Scaling warm pools launch, InfoQ 2021-05);
  plus the node-time part as the sandbox measured it for a baked node (37.2 s,
  ``bench_warm.py`` 2026-12-04, at load 3-5: cluster join, health check). A started warm
  node now runs only the playbook's start part, 10.1 s against the baked node's 13.9 s on
  the idle machine (2026-12-05); the 37 s stay, an upper bound, so that the simulator's
  warm-pool figures in benchmarks/README.md keep their meaning.
"""

from __future__ import annotations

COLD_BOOT_S = 240.0
BAKED_BOOT_S = 120.0
WARM_BOOT_S = 30.0 + 37.0  # the sandbox's 37.2 s, to the second
