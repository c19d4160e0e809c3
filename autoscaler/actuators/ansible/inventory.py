"""The inventory of one run: nodes to bootstrap, how to reach them, their pool's settings.

Every pool setting the roles read is a host variable (highest inventory precedence), so a
batch may mix pools. Variable names are the roles' own (see playbooks/roles/*/defaults).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from autoscaler.actuators.ansible.known_hosts import NODE_NAME, KnownHosts
from autoscaler.actuators.ansible.settings import AnsibleSettings
from autoscaler.catalog.catalog import Catalog, CatalogError
from autoscaler.model.node import Node
from autoscaler.policy.models import Pool, TeamPolicy, find_pool

AddressResolver = Callable[[Node], str | None]
# Addresses come from Terraform outputs or the cloud, node names (NODE_NAME) from the store.
# Both end up on ssh's command line, so anything else (a space, a leading '-') is refused
# rather than passed on.
_HOST_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]{0,252}[A-Za-z0-9])?$")


class InventoryError(ValueError):
    pass


@dataclass(frozen=True)
class Unresolved:
    """A node left out of the run, and why."""

    node: str
    reason: str


def pool_of(node: Node, policies: Mapping[str, TeamPolicy]) -> Pool:
    pool = find_pool(policies, node.team, node.pool)
    if pool is None:
        raise InventoryError(f"{node.name}: no policy for pool {node.team}/{node.pool}")
    return pool


def _number(value: float) -> int | float:
    """50.0 -> 50, so CUDA_MPS_ACTIVE_THREAD_PERCENTAGE reads naturally."""
    return int(value) if float(value).is_integer() else value


def pool_vars(team: str, pool: Pool) -> dict[str, Any]:
    """The pool's bootstrap and cluster settings as role variables."""
    boot, cluster = pool.bootstrap, pool.cluster
    return {
        "nvidia_driver_branch": boot.driver,
        "cuda_toolkit_version": boot.cuda,
        "container_toolkit_runtime": boot.container_runtime,
        "image_prepull_images": list(boot.prepull),
        "gpu_sharing_mode": boot.sharing,
        "gpu_sharing_mig_profiles": list(boot.mig_profiles),
        "gpu_sharing_mps_active_thread_percentage": _number(boot.mps.active_thread_percentage),
        "gpu_sharing_mps_pinned_device_mem_limit_mib": boot.mps.pinned_device_mem_limit_mib,
        "gpu_sharing_time_slicing_replicas": boot.time_slicing_replicas,
        "gpu_sharing_mps_replicas": boot.mps.replicas,
        "gpu_health_check_dcgm_diag_level": boot.dcgm_diag_level,
        "gpu_health_check_max_temperature": _number(pool.health.max_gpu_temperature),
        "cluster_join_kind": cluster.kind,
        "cluster_join_slurm_partition": cluster.partition,
        "cluster_join_labels": dict(cluster.labels),
        "cluster_join_taints": [{"key": k, "value": v, "effect": e}
                                for k, v, e in cluster.taint_triples()],
        "cluster_join_team": team,
        "cluster_join_pool": pool.name,
    }


def node_vars(node: Node, catalog: Catalog | None) -> dict[str, Any]:
    """What the health check expects of this instance type, and the node's market."""
    out: dict[str, Any] = {"cluster_join_market": node.market.value,
                           "gpu_node_instance_type": node.instance_type,
                           "cluster_join_region": node.region, "cluster_join_zone": node.zone or ""}
    if catalog is not None:
        try:
            itype = catalog.get(node.cloud, node.instance_type)
        except CatalogError:
            return out
        out["gpu_health_check_expected_gpus"] = itype.gpus
        out["gpu_health_check_expected_model"] = itype.gpu_model
    return out


def connection_vars(node: str, address: str, settings: AnsibleSettings,
                    known: KnownHosts | None = None) -> dict[str, Any]:
    # The host key is pinned under the node name, in the node's own file: addresses are
    # reused by clouds, names never by the fleet store. Common args: sftp and scp (file
    # transfers without a shared connection) check the same key as ssh.
    known = known or KnownHosts.of(settings)
    out: dict[str, Any] = {"ansible_host": address, "ansible_port": settings.ssh_port,
                           "ansible_user": settings.ssh_user,
                           "ansible_ssh_common_args": known.ssh_options(node)}
    if settings.private_key_file is not None:
        out["ansible_ssh_private_key_file"] = str(settings.private_key_file)
    return out


def _refused(name: str, address: str) -> str | None:
    if not NODE_NAME.match(name):
        return f"node name {name!r} is not a host name; not configured"
    try:
        ipaddress.ip_address(address)
    except ValueError:
        if not _HOST_NAME.match(address):
            return f"address {address[:80]!r} is not an IP address or host name; not connected"
    return None


def build_inventory(nodes: Sequence[Node], policies: Mapping[str, TeamPolicy],
                    settings: AnsibleSettings, address_of: AddressResolver,
                    catalog: Catalog | None = None) -> tuple[dict[str, Any], list[Unresolved]]:
    """Inventory dict for ansible-runner, and the nodes that could not be included."""
    hosts: dict[str, dict[str, Any]] = {}
    skipped: list[Unresolved] = []
    known = KnownHosts.of(settings)
    for node in nodes:
        try:
            address = address_of(node)
        except Exception as exc:  # a resolver failure fails only that node
            skipped.append(Unresolved(node.name, f"no address: {exc}"))
            continue
        if not address:
            skipped.append(Unresolved(node.name, "no address yet"))
            continue
        problem = _refused(node.name, address)
        if problem:
            skipped.append(Unresolved(node.name, problem))
            continue
        hosts[node.name] = {**connection_vars(node.name, address, settings, known),
                            **pool_vars(node.team, pool_of(node, policies)),
                            **node_vars(node, catalog)}
    become = settings.become if settings.become is not None else settings.ssh_user != "root"
    inventory = {"all": {"hosts": hosts, "vars": {"gpu_node_become": become}}}
    return inventory, skipped
