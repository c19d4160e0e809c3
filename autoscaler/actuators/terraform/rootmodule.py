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
from pathlib import Path
from typing import Any

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
NODES_TYPE = "map(object({instance_type = string, market = string, zone = string}))"
# AWS APIs the provider and the S3 backend may call; all go to the one endpoint if set.
_AWS_SERVICES = ("ec2", "sts", "iam", "s3", "autoscaling")
_SKIP_CHECKS = {
    "skip_credentials_validation": True,
    "skip_requesting_account_id": True,
    "skip_metadata_api_check": True,
    "skip_region_validation": True,
}


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
            region: str, inputs: RegionInputs, shard: int = 0) -> dict[str, Any]:
    if cloud not in MODULES:
        raise ValueError(f"no Terraform module for cloud {cloud!r} (known: {sorted(MODULES)})")
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
    return {
        "terraform": {
            "required_providers": {cloud: PROVIDERS[cloud]},
            "backend": literal(_backend(settings, team, pool, shard)),
        },
        "provider": {cloud: literal(_provider(settings, cloud, region))},
        "variable": {
            "nodes": {"type": NODES_TYPE, "default": {}},
            "user_data": {"type": "string", "default": "", "sensitive": True},
        },
        "module": {"pool": module},
        "output": {"nodes": {"value": "${module.pool.nodes}"}},
    }


def literal(value: Any) -> Any:
    """``value`` with every string escaped so Terraform reads it as plain text."""
    if isinstance(value, str):
        return value.replace("${", "$${").replace("%{", "%%{")
    if isinstance(value, dict):
        return {literal(k): literal(v) for k, v in value.items()}
    if isinstance(value, list):
        return [literal(v) for v in value]
    return value


def tfvars(nodes: NodeMap, inputs: RegionInputs) -> dict[str, Any]:
    return {"nodes": {name: spec.tf() for name, spec in sorted(nodes.items())},
            "user_data": inputs.user_data}


def _provider(settings: TerraformSettings, cloud: str, region: str) -> dict[str, Any]:
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
