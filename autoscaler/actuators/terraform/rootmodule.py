"""The files of one pool's root module: main.tf.json, the CLI config and the tfvars.

The root module is generated as JSON (Terraform's JSON syntax) so no value ever needs
HCL quoting. It calls the pool module through a relative path, holds the provider and
backend configuration, and takes the node map and user data as variables from
terraform.tfvars.json (mode 0600: user data may carry join tokens).

Terraform reads every string of a ``.tf.json`` file as a template: ``${...}`` and ``%{...}``
in a region, an AMI id or a subnet would be evaluated (``${file("/etc/passwd")}``). Every
value written into main.tf.json therefore goes through :func:`literal`, which doubles them
(``$${``, ``%%{``: Terraform's escapes for a literal ``${`` and ``%{``); only the references
built here (``${var.nodes}``) are templates. Values in terraform.tfvars.json are never
evaluated, so the node map (names, types, zones) needs no escaping.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from autoscaler.actuators.node_map import NodeMap
from autoscaler.actuators.terraform.settings import (
    RegionInputs,
    S3Backend,
    TerraformSettings,
)

MODULES = {"aws": "aws-gpu-pool", "alicloud": "alicloud-gpu-pool"}
PROVIDERS = {
    "aws": {"source": "hashicorp/aws", "version": ">= 5.0, < 6.0"},
    "alicloud": {"source": "aliyun/alicloud", "version": ">= 1.200.0"},
}
NODES_TYPE = ("map(object({instance_type = string, market = string, zone = string, "
              "power = optional(string, \"\")}))")
# AWS APIs the provider and the S3 backend may call; all go to the one endpoint if set.
_AWS_SERVICES = ("ec2", "sts", "iam", "s3", "autoscaling")
_SKIP_CHECKS = {
    "skip_credentials_validation": True,
    "skip_requesting_account_id": True,
    "skip_metadata_api_check": True,
    "skip_region_validation": True,
}


# The tag a baked image carries: the bootstrap hash of what was baked into it
# (autoscaler/actuators/bootstrap_hash.py). Images are shared by every pool of the account
# whose hash is the same.
HASH_TAG = "gpu-autoscaler/bootstrap-hash"


@dataclass(frozen=True)
class BakedImage:
    """A pool with ``bootstrap.image: baked``: the hash its image must carry, and what a
    launch does when no image has it (``bootstrap.when_stale``)."""

    hash: str
    when_stale: Literal["full", "hold"]


def cli_config(settings: TerraformSettings) -> str:
    """Providers only from the filesystem mirror: nothing is downloaded, ever."""
    return (
        "provider_installation {\n"
        "  filesystem_mirror {\n"
        f"    path    = {json.dumps(str(settings.plugin_mirror))}\n"
        '    include = ["registry.terraform.io/*/*"]\n'
        "  }\n"
        '  direct {\n    exclude = ["*/*"]\n  }\n'
        "}\n"
        "disable_checkpoint = true\n"
    )


def main_tf(settings: TerraformSettings, workdir: Path, team: str, pool: str, cloud: str,
            region: str, inputs: RegionInputs, shard: int = 0,
            image: BakedImage | None = None) -> dict[str, Any]:
    if cloud not in MODULES:
        raise ValueError(f"no Terraform module for cloud {cloud!r} (known: {sorted(MODULES)})")
    if image is not None and cloud != "aws":
        raise ValueError(f"baked images are looked up on aws only, not {cloud!r}")
    source = os.path.relpath(settings.modules_dir / MODULES[cloud], workdir)
    values: dict[str, Any] = literal({
        "team": team, "pool": pool, "region": region,
        "ami": inputs.ami, "subnet_ids": inputs.subnet_ids,
        "security_group_ids": inputs.security_group_ids, "key_name": inputs.key_name,
        "iam_instance_profile": inputs.iam_instance_profile,
        "root_volume_gb": inputs.root_volume_gb, "spot_max_price": inputs.spot_max_price,
    })
    module: dict[str, Any] = {
        # A module source is a path, never a template: it is not escaped.
        "source": source if source.startswith(".") else f"./{source}",
        **values, "nodes": "${var.nodes}", "user_data": "${var.user_data}",
    }
    root: dict[str, Any] = {
        "terraform": {
            "required_providers": {cloud: PROVIDERS[cloud]},
            "backend": literal(_backend(settings, team, pool, shard)),
        },
        "provider": {cloud: literal(provider_config(settings, cloud, region))},
        "variable": {
            "nodes": {"type": NODES_TYPE, "default": {}},
            "user_data": {"type": "string", "default": "", "sensitive": True},
        },
        "module": {"pool": module},
        "output": {"nodes": {"value": "${module.pool.nodes}"}},
    }
    if image is not None:
        _baked(root, image, inputs.ami)
    return root


def _baked(root: dict[str, Any], image: BakedImage, base_ami: str) -> None:
    """New nodes launch from the newest image of the account tagged with the hash (aws_ami_ids
    sorts newest first), else from the base image; with ``when_stale: hold`` a plan that
    launches a node (``var.hold_if_stale``, set by tfvars) fails instead. The ``image``
    output says which image and whether it was stale."""
    hold = (f"stale: no image tagged {HASH_TAG}={image.hash}; bootstrap.when_stale is hold, "
            "so no node is launched until an image with this hash is baked")
    root["data"] = {"aws_ami_ids": {"baked": {
        "owners": ["self"],
        "filter": [{"name": f"tag:{HASH_TAG}", "values": [literal(image.hash)]},
                   {"name": "state", "values": ["available"]}],
        "lifecycle": [{"postcondition": [{
            "condition": "${length(self.ids) > 0 || !var.hold_if_stale}",
            "error_message": literal(hold)}]}],
    }}}
    root["locals"] = {
        "base_ami": literal(base_ami), "bootstrap_hash": literal(image.hash),
        "baked_ami": '${try(data.aws_ami_ids.baked.ids[0], "")}',
        "ami": '${local.baked_ami != "" ? local.baked_ami : local.base_ami}',
    }
    root["variable"]["hold_if_stale"] = {"type": "bool", "default": False}
    root["module"]["pool"]["ami"] = "${local.ami}"
    root["output"]["image"] = {"value": {
        "id": "${local.ami}", "hash": "${local.bootstrap_hash}",
        "stale": '${local.baked_ami == ""}'}}


def literal(value: Any) -> Any:
    """``value`` with every string escaped so Terraform reads it as plain text."""
    if isinstance(value, str):
        return value.replace("${", "$${").replace("%{", "%%{")
    if isinstance(value, dict):
        return {literal(k): literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal(v) for v in value]
    return value


def tfvars(nodes: NodeMap, inputs: RegionInputs, image: BakedImage | None = None,
           launching: bool = False) -> dict[str, Any]:
    """The node map and user data; for a baked pool also whether a stale image must hold
    this run (``when_stale: hold`` and the map launches a node)."""
    out: dict[str, Any] = {"nodes": {name: spec.tf() for name, spec in sorted(nodes.items())},
                           "user_data": inputs.user_data}
    if image is not None:
        out["hold_if_stale"] = image.when_stale == "hold" and launching
    return out


def provider_config(settings: TerraformSettings, cloud: str, region: str) -> dict[str, Any]:
    """The provider block of a root module (endpoints and skipped checks for moto)."""
    if cloud != "aws":
        return {"region": region}
    provider: dict[str, Any] = {"region": region, "max_retries": settings.aws_max_retries}
    if settings.aws_endpoint:
        provider["endpoints"] = [{svc: settings.aws_endpoint for svc in _AWS_SERVICES}]
        provider.update(_SKIP_CHECKS, s3_use_path_style=True)
    return provider


LOCAL_STATE = "terraform.tfstate"  # in the workspace's directory


def _backend(settings: TerraformSettings, team: str, pool: str, shard: int) -> dict[str, Any]:
    backend = settings.backend
    if not isinstance(backend, S3Backend):
        return {"local": {"path": LOCAL_STATE}}
    where = f"{team}/{pool}" if shard == 0 else f"{team}/{pool}/shards/{shard}"
    conf: dict[str, Any] = {
        "bucket": backend.bucket,
        "key": f"{backend.key_prefix.strip('/')}/{where}/terraform.tfstate",
        "region": backend.region,
        "use_lockfile": backend.use_lockfile,
    }
    if backend.endpoint:
        conf.update(_SKIP_CHECKS, endpoints={"s3": backend.endpoint}, use_path_style=True)
    return {"s3": conf}


def write_private(path: Path, text: str) -> None:
    """Write ``text`` readable by the owner only (atomically: no half files)."""
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    tmp.replace(path)
