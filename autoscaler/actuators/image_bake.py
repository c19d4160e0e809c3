"""``gpu-autoscaler image bake TEAM/POOL``: a pool's baked image, made by the playbook that
bootstraps its nodes, so the two never drift apart.

1. Terraform launches a builder from the pool's base image (``terraform/bake.py``), on
   demand (a spot reclaim would waste the bake), of the pool's first instance type: the
   image-time part checks the driver on the GPUs it was built for.
2. Once its SSH port answers (bounded by the pool's ``bootstrap.timeout``), Ansible runs the
   image-time part of gpu-node.yml on it (``--tags image``: driver, CUDA, container toolkit,
   DCGM and dcgm-exporter), with the pool's variables and no secret.
3. Terraform makes an image of it, tagged with the pool's bootstrap hash.
4. The builder is destroyed, on success and on failure, and the pool's images beyond its
   ``bootstrap.images_kept`` are deregistered, newest kept (only after a successful bake:
   a failed one never costs an image). An image of the pool that no state holds (a
   CreateImage whose answer was lost) is adopted and counted with the others
   (``terraform/bake.py``), so it is never paid for forever.

A pool whose hash matches the new image launches from it at its next apply; its nodes run
only the node-time part. A bake killed midway leaves its builder in the bake's state:
running the bake again finishes it.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

from autoscaler.actuators.ansible import AnsibleActuator, BootstrapRun
from autoscaler.actuators.bootstrap_hash import baked_images
from autoscaler.actuators.terraform.bake import BakeWorkspace, Builder, KeptImage
from autoscaler.actuators.terraform.settings import TerraformSettings
from autoscaler.model.clock import Clock, utc_now
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.policy.models import Market, Pool, TeamPolicy, find_pool, pool_key

log = logging.getLogger(__name__)
AddressOf = Callable[[Node], str | None]


class BakeError(RuntimeError):
    pass


@dataclass
class BakeResult:
    pool: str
    hash: str
    image: str | None = None
    builder: str | None = None
    run: BootstrapRun | None = None
    deregistered: list[KeptImage] = field(default_factory=list)
    adopted: list[KeptImage] = field(default_factory=list)  # untracked images found
    kept: list[KeptImage] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)  # step -> wall seconds


def wait_for_port(address: str, port: int, timeout_s: float, *,
                  sleep: Callable[[float], None] = time.sleep,
                  monotonic: Callable[[], float] = time.monotonic) -> None:
    """Until ``address:port`` accepts a TCP connection; BakeError after ``timeout_s``."""
    deadline = monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection((address, port), timeout=3):
                return
        except OSError as exc:
            if monotonic() >= deadline:
                raise BakeError(f"the builder at {address} did not answer on port {port} "
                                f"within {timeout_s:.0f} s: {exc}") from exc
        sleep(1.0)


def bake_pool(policies: Mapping[str, TeamPolicy], team: str, pool_name: str, *,
              terraform: TerraformSettings, ansible: AnsibleActuator, address_of: AddressOf,
              instance_type: str | None = None, clock: Clock = utc_now,
              say: Callable[[str], None] = log.info,
              workspace: Callable[..., BakeWorkspace] = BakeWorkspace) -> BakeResult:
    """Bake ``team/pool_name``'s image (module docstring). Raises BakeError with the step
    that failed; the builder is gone either way."""
    key = pool_key(team, pool_name)
    pool = find_pool(policies, team, pool_name)
    if pool is None:
        raise BakeError(f"no pool {key} in the policies")
    if pool.bootstrap.image != "baked":
        raise BakeError(f"pool {key} has bootstrap.image: base; set bootstrap.image: baked "
                        "so its nodes launch from the image")
    image = baked_images({team: policies[team]}, terraform, ansible.settings).get(key)
    if image is None:
        raise BakeError(f"no Terraform inputs for {pool.cloud.value}/{pool.region} "
                        "(terraform.regions): no base image to bake from")
    itype = instance_type or pool.instance_types[0]
    ws = workspace(terraform, team, pool_name, pool.region, hash_=image.hash,
                   instance_type=itype, clock=clock)
    result = BakeResult(pool=key, hash=image.hash)
    say(f"baking {key}: bootstrap hash {image.hash}, builder {ws.builder_name} "
        f"({itype}) from the base image")
    ok = False
    try:
        started = time.monotonic()
        builder = ws.launch_builder()
        result.builder = builder.instance_id
        result.seconds["launch"] = time.monotonic() - started
        say(f"builder {builder.instance_id} launched in {result.seconds['launch']:.0f} s")
        builder_node = _builder_node(ws, builder, team, pool, itype, clock())
        result.run = _image_time_part(builder_node, pool.bootstrap.timeout.total_seconds(),
                                      policies, ansible, address_of, result, say)
        if pool.bootstrap.prepull:
            say(f"pre-pulled into containerd: {', '.join(pool.bootstrap.prepull)}")
        started = time.monotonic()
        result.image = ws.make_image(builder)
        result.seconds["image"] = time.monotonic() - started
        say(f"image {result.image} made in {result.seconds['image']:.0f} s")
        ok = True
    finally:
        started = time.monotonic()
        try:
            result.deregistered = ws.finish(keep=pool.bootstrap.images_kept if ok else None)
        except Exception as exc:
            # The bake's own failure, if any, is the one to report; this one must be seen.
            log.error("bake of %s: the builder %s could not be destroyed: %s; run the bake "
                      "again to finish it", key, result.builder, exc)
            if ok:
                raise BakeError(f"the image {result.image} was made but the builder "
                                f"{result.builder} could not be destroyed: {exc}; run the "
                                "bake again to finish it") from exc
        result.seconds["finish"] = time.monotonic() - started
        result.adopted = list(ws.adopted)
        if result.adopted:
            log.warning("bake of %s: adopted %d image(s) of the pool that no state held "
                        "(left by a CreateImage whose answer was lost): %s", key,
                        len(result.adopted), ", ".join(f"{i.id} ({i.name})" for i in result.adopted))
    result.kept = ws.images()
    say(f"builder {result.builder} destroyed; {len(result.kept)} image(s) kept"
        + (f", adopted untracked {', '.join(i.id for i in result.adopted)}"
           if result.adopted else "")
        + (f", deregistered {', '.join(i.id for i in result.deregistered)}"
           if result.deregistered else ""))
    return result


def _builder_node(ws: BakeWorkspace, builder: Builder, team: str, pool: Pool, itype: str,
                  now: datetime) -> Node:
    """The builder as the Ansible actuator sees a node: its pool's variables, its own name."""
    return Node(name=ws.builder_name, team=team, pool=pool.name, cloud=pool.cloud.value,
                region=pool.region, instance_type=itype, market=Market.ON_DEMAND,
                state=NodeState.BOOTSTRAPPING, state_since=now, created_at=now,
                instance_id=builder.instance_id, address=builder.private_ip,
                reason="bake builder")


def _image_time_part(node: Node, timeout_s: float, policies: Mapping[str, TeamPolicy],
                     ansible: AnsibleActuator, address_of: AddressOf, result: BakeResult,
                     say: Callable[[str], None]) -> BootstrapRun:
    address = address_of(node) or node.address
    if not address:
        raise BakeError(f"no address for the builder {node.instance_id}")
    node = node.with_instance(instance_id=node.instance_id, address=address)
    started = time.monotonic()
    wait_for_port(address, ansible.settings.ssh_port, timeout_s)
    result.seconds["boot"] = time.monotonic() - started
    started = time.monotonic()
    run = ansible.bake(node, policies)
    result.seconds["ansible"] = time.monotonic() - started
    host = run.hosts.get(node.name)
    if host is None or node.name not in run.ok:
        where = f" at task '{host.failed_task}'" if host and host.failed_task else ""
        why = f"{host.status.value}{where}: {host.message}" if host else run.status
        raise BakeError(f"the image-time part failed on the builder {node.instance_id}: "
                        f"{why} (run {run.run_dir})")
    say(f"image-time part ran on {node.name} in {result.seconds['ansible']:.0f} s "
        f"({host.changed} changed; run {run.run_dir})")
    return run
