"""How a pool's nodes are spread over Terraform workspaces of bounded size (shards).

Terraform reads, plans and writes a workspace's whole state on every run: with all the
nodes of a 500-node pool in one state, launching ten more cost 2.3 times what it costs in
a 10-node pool (benchmarks/bench_terraform.py, docs/designs/terraform-scale.md). So a
pool's nodes live in shards of at most ``shard_size`` nodes, each a workspace of its own
(root module, state, lock), and an apply runs only in the shards whose nodes change.

Which shard holds a node:

* a node stays in the shard whose last apply holds it (nothing is ever moved between
  states, so no ``terraform state mv`` can be half done);
* a new node goes to the shard its name's number points to: ``<team>-<pool>-<n>`` is in
  shard ``(n - 1) // shard_size``. Names are never reused and numbered upwards, so k new
  nodes fill at most ``k // shard_size + 2`` shards, and the shard of a node is known from
  its name alone: after a crash, an apply killed before it recorded anything retries in
  the same shard, where the instance it may have made is found and imported.

A pool applied before shards existed holds all its nodes in shard 0 (the pool's own
directory) and keeps them there until they go; its new nodes go by their numbers.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from autoscaler.actuators.node_map import NodeMap

SHARDS_DIR = "shards"
_NUMBER = re.compile(r"-(\d{1,9})$")


def home(name: str, size: int) -> int:
    """The shard a new node of this name goes to (0 for a name without a number)."""
    found = _NUMBER.search(name)
    return max(int(found.group(1)) - 1, 0) // size if found else 0


def directory(pool_dir: Path, shard: int) -> Path:
    """Shard 0 is the pool's own directory (as before shards), shard k its ``shards/k``."""
    return pool_dir if shard == 0 else pool_dir / SHARDS_DIR / str(shard)


def existing(pool_dir: Path) -> list[int]:
    """The shards that have a workspace under ``pool_dir`` (0 first when it exists)."""
    found = [0] if (pool_dir / "main.tf.json").exists() else []
    sub = pool_dir / SHARDS_DIR
    if sub.is_dir():
        found += sorted(int(p.name) for p in sub.iterdir()
                        if p.name.isdigit() and (p / "main.tf.json").exists())
    return found


def held(applied: Mapping[int, NodeMap]) -> dict[str, int]:
    """Node -> the shard whose last apply holds it (the lowest, were two to hold it)."""
    return {name: shard for shard in sorted(applied, reverse=True) for name in applied[shard]}


def assign(nodes: NodeMap, held: Mapping[str, int], size: int,
           shards: Iterable[int] = ()) -> dict[int, NodeMap]:
    """The node map of every shard: each node where ``held`` says, else at its home.
    Every shard in ``shards`` gets a map, empty if no node is left in it (so its nodes
    that left the pool's map are destroyed)."""
    out: dict[int, NodeMap] = {shard: {} for shard in shards}
    for name, spec in sorted(nodes.items()):
        out.setdefault(held.get(name, home(name, size)), {})[name] = spec
    return out
