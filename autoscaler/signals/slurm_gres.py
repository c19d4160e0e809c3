"""What a Slurm gres (a job's request or allocation, a node's gres) is in GPUs of a pool's
node, when the pool shares its GPUs (``bootstrap.sharing``), as on Kubernetes
(``kube_fit.PoolShape``):

=========================  ========================================  ========================
gres                       on a pool with                            GPUs per unit
=========================  ========================================  ========================
``gpu[:<model>]``          sharing none, mps or time-slicing         1
``gpu:<MIG profile>``      sharing mig, the profile in mig_profiles  1 / its count there
``shard[:<model>]``        sharing mps                               1 / mps.replicas
``shard[:<model>]``        sharing time-slicing                      1 / time_slicing_replicas
anything else              -                                         not offered: unserved
=========================  ========================================  ========================

A MIG profile is a gres type ``<n>g.<m>gb`` (``cluster_join`` writes those), or
``<gpu>_<profile>`` as Slurm's NVML autodetection names them (``a100_3g.40gb``). Only a
request of a MIG profile or of shards is read here; ``gpu:t4:2`` keeps its GPU-model
matching (``slurm.py``). squeue's text is the submitter's: a type outside Slurm's
name characters, or a count that is not a number of at most ``MAX_UNITS``, is unreadable.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence

from autoscaler.policy.models import Pool
from autoscaler.schedulers.slurm.parse import Gres
from autoscaler.signals.readings import ClusterPool, key_by_name_prefix

MIG_TYPE = re.compile(r"(?:[a-z0-9]{1,16}_)?([1-8]g\.[0-9]{1,4}gb(?:\+me)?)")
_TYPE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,63}")
MAX_UNITS = 4096.0  # shards of a node: 8 GPUs x 64 replicas is 512; gres.conf allows 1024 files
SHARD = "shard"
GPU = "gpu"


def mig_profile(gres_type: str | None) -> str | None:
    """``3g.40gb`` or ``a100_3g.40gb`` -> ``3g.40gb``; None for a GPU model (``t4``)."""
    match = MIG_TYPE.fullmatch(gres_type.lower()) if gres_type else None
    return match.group(1) if match else None


def gpu_like(gres: Sequence[Gres]) -> list[Gres]:
    """The gpu and shard entries of a gres list (``cpu``, ``mps`` and the like dropped)."""
    return [g for g in gres if g.name in (GPU, SHARD)]


def shared(gres: Sequence[Gres]) -> bool:
    """Whether the request names a share of a GPU: a MIG profile or shards."""
    return any(g.name == SHARD or (g.name == GPU and mig_profile(g.type)) for g in gres)


def unreadable(gres: Sequence[Gres]) -> str | None:
    """Why a request cannot be believed (never quoting it), None when it can."""
    for g in gres:
        if g.type is not None and not _TYPE.fullmatch(g.type):
            return f"a {g.name} type that is not a Slurm name ({len(g.type)} characters)"
        if not (math.isfinite(g.count) and 0 <= g.count <= MAX_UNITS):
            return f"a {g.name} count that is not a number from 0 to {MAX_UNITS:g}"
    return None


def share(pool: Pool, g: Gres) -> float | None:
    """The GPUs one unit of ``g`` is on a node of ``pool``; None: its nodes offer none."""
    boot = pool.bootstrap
    profile = mig_profile(g.type) if g.name == GPU else None
    if boot.sharing == "mig":
        if profile is not None and profile in boot.mig_profiles:
            return 1.0 / boot.mig_profiles.count(profile)
        return None
    if g.name == GPU and profile is None:
        return 1.0
    if g.name == SHARD and boot.sharing == "mps":
        return 1.0 / boot.mps.replicas
    if g.name == SHARD and boot.sharing == "time-slicing":
        return 1.0 / boot.time_slicing_replicas
    return None


def offered(pool: Pool) -> list[str]:
    """The gres a pool's nodes advertise, as a job asks for them."""
    boot = pool.bootstrap
    if boot.sharing == "mig":
        return [f"{GPU}:{p}" for p in sorted(set(boot.mig_profiles))]
    return [GPU, SHARD] if boot.sharing in ("mps", "time-slicing") else [GPU]


def asked(gres: Sequence[Gres]) -> str:
    """A checked request as text: ``gpu:3g.40gb:1``, ``shard:2``."""
    return ",".join(f"{g.name}{':' + g.type if g.type else ''}:{g.count:g}" for g in gres)


def gpus_on(pool: Pool, gres: Sequence[Gres]) -> float | None:
    """The request in GPUs of one of the pool's nodes; None when its nodes lack some of it."""
    total = 0.0
    for g in gpu_like(gres):
        unit = share(pool, g)
        if unit is None:
            if g.count > 0:
                return None
            continue
        total += g.count * unit
    return total


def unpooled_gpus(gres: Sequence[Gres]) -> float:
    """GPUs of a request no pool prices: whole GPUs as asked, a MIG slice as one GPU, and
    shards as one GPU (the shards of one job share a GPU)."""
    whole = sum(g.count for g in gres if g.name == GPU)
    return whole + (1.0 if any(g.name == SHARD and g.count > 0 for g in gres) else 0.0)


def node_gpus(pool: Pool, gres: Sequence[Gres]) -> float:
    """A node's GPUs from its gres on a sharing pool: whole GPUs, plus MIG slices at their
    share (a shard node also lists its GPUs as gpu: shards are not counted twice)."""
    return sum(g.count * (share(pool, g) or 0.0) for g in gpu_like(gres) if g.name == GPU)


def used_gpus(pool: Pool, gres: Sequence[Gres]) -> float:
    """A node's allocated GPUs from its ``gres_used``: whole GPUs, MIG slices and shards
    at their share."""
    return sum(g.count * (share(pool, g) or 0.0) for g in gpu_like(gres))


def pool_by_name(refs: Sequence[ClusterPool]) -> Callable[[str], Pool | None]:
    """A node's pool from its name (fleet names are ``<team>-<pool>-<n>``)."""
    pools = {ref.key: ref.pool for ref in refs}
    key_of = key_by_name_prefix(pools)

    def pool_of(host: str) -> Pool | None:
        key = key_of(host)
        return None if key is None else pools[key]

    return pool_of
