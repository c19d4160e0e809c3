"""What the sandbox writes for the service: ``service.yaml``, ``env`` and Slurm's node list."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ruamel.yaml import YAML

from autoscaler.catalog import Catalog, CatalogError
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.first_boot import SANDBOX_USER_DATA
from autoscaler.sandbox.hosts.netns import CONTROLLER_ADDRESS
from autoscaler.sandbox.services.moto_server import MOTO_AMI
from autoscaler.sandbox.services.spot_notices import queues

if TYPE_CHECKING:
    from autoscaler.sandbox.services.slurm import SlurmNodeSpec

SSH_PORT = 2222
MUNGE_KEY_ENV = "GAS_SANDBOX_MUNGE_KEY_B64"  # the munge key, base64, for the join (a secret)


class WiredStack(Protocol):
    """What the service config is rendered from: a ``SandboxStack``, named by its parts so
    that this module does not import the stack that imports it."""

    dir: Path
    options: Any
    state: Any
    policies: dict[str, TeamPolicy]
    kube: Any
    address_file: Path


def slurm_node_specs(policies: Mapping[str, TeamPolicy], catalog: Catalog, per_pool: int,
                     placeholder: str) -> list[SlurmNodeSpec]:
    """Names the engine will give the Slurm pools' nodes (``<team>-<pool>-<n>``), declared
    up front with their pool's partition and GPUs; their slurmd registers later."""
    from autoscaler.sandbox.services.slurm import SlurmNodeSpec

    specs = []
    for policy in policies.values():
        for pool in policy.pools:
            if pool.cluster.kind != "slurm":
                continue
            gpus, model = 1, "v100"
            for name in pool.instance_types:
                try:
                    itype = catalog.get(pool.cloud.value, name)
                except CatalogError:
                    continue
                if itype.gpus >= gpus:
                    gpus, model = itype.gpus, itype.gpu_model.lower()
            for i in range(1, per_pool + 1):
                specs.append(SlurmNodeSpec(
                    name=f"{policy.team}-{pool.name}-{i}", gpus=gpus, gpu_type=model,
                    partition=pool.cluster.partition, local=False, addr=placeholder))
    return specs


def slurm_partitions(policies: Mapping[str, TeamPolicy]) -> list[str]:
    """The partitions of the Slurm pools, in policy order."""
    return list(dict.fromkeys(pool.cluster.partition for policy in policies.values()
                              for pool in policy.pools if pool.cluster.kind == "slurm"))


def aws_regions(policies: Mapping[str, TeamPolicy]) -> list[str]:
    return sorted({p.region for t in policies.values() for p in t.pools if p.cloud.value == "aws"}
                  or {"us-east-1"})


def prometheus_section(opts: Any, url: str) -> dict[str, Any]:
    """How the service reads the sandbox's Prometheus: raw series, or the recording rules
    the stack loaded (evaluated at the scrape interval)."""
    section: dict[str, Any] = {"url": url, "timeout": "3s"}
    if opts.recording_rules:
        section |= {"recording_rules": True, "rules_interval": opts.scrape_interval}
    return section


def render_service_config(stack: WiredStack) -> dict[str, Any]:
    """A service config wired to this sandbox's endpoints (written as service.yaml)."""
    opts, d, ep = stack.options, stack.dir, stack.state.endpoints
    regions = aws_regions(stack.policies)
    slurm_conf = ep.get("slurm_conf")
    # A registry the sandbox runs there (sandbox/services/registry.py) has no TLS.
    extra_vars: dict[str, Any] = {"image_prepull_plain_http": [CONTROLLER_ADDRESS]}
    signals: dict[str, Any] = {
        "prometheus": prometheus_section(opts, ep["prometheus"]),
        "scheduler": ["slurm"] if slurm_conf else [],
    }
    # ControlPersist: one SSH connection per host for the whole play (a task costs ~0.1 s
    # instead of a new connection); the masters exit when the host's sshd is killed.
    ansible: dict[str, Any] = {
        "runs_dir": str(d / "ansible-runs"), "private_key_file": str(d / "hosts" / "client_key"),
        "ssh_port": SSH_PORT, "ssh_user": "root", "control_persist": True,
        "skip_tags": ["gpu-hardware", "external-repo"], "extra_vars": extra_vars,
    }
    if slurm_conf:
        signals["slurm"] = {"env": {"SLURM_CONF": slurm_conf},
                            "registration": opts.slurm_registration}
        extra_vars["cluster_join_slurm_conf_src"] = slurm_conf
        ansible["secret_env"] = {"cluster_join_munge_key_b64": MUNGE_KEY_ENV}
    if stack.kube is not None:
        _kubernetes(stack.kube, signals, ansible)
    config: dict[str, Any] = {
        "policies_dir": str(opts.policies_dir) if opts.policies_dir else str(d / "policies"),
        "tick": {"interval": opts.tick_interval},
        "store": {"url": f"sqlite:///{d / 'fleet.db'}"},
        "signals": signals,
        # moto's spot price history is one fake row at $0.00001: use the catalog's prices.
        "clouds": {"aws": {"regions": regions, "endpoint_url": ep["moto"],
                           # `gpu-autoscaler sandbox interrupt` sends spot notices there.
                           "sqs_queue_urls": queues(ep)},
                   "market_prices": False},
        "terraform": {"workdir": str(d / "terraform"), "aws_endpoint": ep["moto"],
                      # Run by each node at its first boot (first_boot.py), as on EC2.
                      "regions": {f"aws/{r}": {"ami": MOTO_AMI, "user_data": SANDBOX_USER_DATA}
                                  for r in regions}},
        "ansible": ansible,
        "addresses": {"source": "file", "file": str(stack.address_file), "wait": "20s"},
        "http": {"listen": f"127.0.0.1:{opts.http_port}"},
        "executor": dict(opts.executor),
    }
    if opts.prices_file is not None:
        config["prices_file"] = str(opts.prices_file)
    return config


def _kubernetes(kube: Any, signals: dict[str, Any], ansible: dict[str, Any]) -> None:
    """The fake API server for the reader and drainer; for the join, its endpoint and the
    bootstrap token (a secret, from the environment)."""
    from autoscaler.sandbox.stack.kube_cluster import CA_CERT_HASH, TOKEN_ENV

    signals["scheduler"] = [*signals["scheduler"], "kubernetes"]
    signals["kubernetes"] = {"host": kube.url, "timeout": "5s"}
    ansible["extra_vars"].update(cluster_join_k8s_api_endpoint=kube.endpoint,
                                 cluster_join_k8s_ca_cert_hash=CA_CERT_HASH)
    ansible.setdefault("secret_env", {})["cluster_join_k8s_token"] = TOKEN_ENV


def write_yaml(path: Path, data: dict[str, Any]) -> None:
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    with open(path, "w") as fh:
        fh.write("# Written by `gpu-autoscaler sandbox up`: the service wired to this sandbox.\n")
        yaml.dump(data, fh)


def render_env(env: Mapping[str, str]) -> str:
    """Shell lines to ``source`` before ``gpu-autoscaler run --config service.yaml``."""
    return "".join(f"export {k}={shlex.quote(v)}\n" for k, v in sorted(env.items()))
