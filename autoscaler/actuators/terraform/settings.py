"""Where pool workspaces live, which backend holds their state, and the per-region inputs.

Credentials are never part of these settings: Terraform and boto3 read them from the
environment or the standard credential chain, so they never reach a .tf file or a log.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML

from autoscaler.policy.paths import ConfigPath

# terraform/modules next to the autoscaler package (a source checkout or editable install).
DEFAULT_MODULES_DIR = Path(__file__).resolve().parents[3] / "terraform" / "modules"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class LocalBackend(_Model):
    kind: Literal["local"] = Field("local", description="State in files under workdir.")


class S3Backend(_Model):
    """State in S3, one object per pool; ``use_lockfile`` locks with a .tflock object."""

    kind: Literal["s3"] = Field("s3", description="State in S3, one object per pool.")
    bucket: str = Field(description="The state bucket.")
    key_prefix: str = Field("gpu-autoscaler", description="Prefix of each pool's state key.")
    region: str = Field("us-east-1", description="Region of the bucket.")
    endpoint: str | None = Field(None, description="S3 endpoint URL (moto in tests).")
    use_lockfile: bool = Field(True, description="Lock with a .tflock object.")


Backend = Annotated[LocalBackend | S3Backend, Field(discriminator="kind")]


class RegionInputs(_Model):
    """Pool-level module inputs shared by every pool of one cloud region."""

    ami: str = Field(description="Image id (AMI, or the ECS image id on Alibaba Cloud).")
    subnet_ids: list[str] = Field(default_factory=list,
                                  description="Subnets (vSwitches); empty = default VPC.")
    security_group_ids: list[str] = Field(default_factory=list, description="Empty: the VPC's default group.")
    key_name: str | None = Field(None, description="EC2 key pair for SSH.")
    iam_instance_profile: str | None = Field(None, description="IAM instance profile name.")
    root_volume_gb: int = Field(100, ge=8, description="Root volume size in GiB.")
    user_data: str = Field("", description="Cloud-init for new nodes; never printed.")
    spot_max_price: str | None = Field(None, description="Highest spot $/h; null: up to on-demand.")


class TerraformSettings(_Model):
    workdir: ConfigPath = Field(Path(".gpu-autoscaler/terraform"),
                          description="Root of the per-pool workspaces (and local state).")
    backend: Backend = Field(LocalBackend(), description="Where pool state lives.")
    aws_endpoint: str | None = Field(
        None, description="Endpoint URL for every AWS API (moto in tests and the sandbox). "
        "Setting it also skips the provider's credential and account checks.")
    regions: dict[str, RegionInputs] = Field(
        default_factory=dict, description="Inputs per 'cloud/region', e.g. 'aws/us-east-1'. "
        "Pools in a cloud region not listed here are not planned by Terraform.")
    aws_max_retries: int = Field(
        3, ge=0, description="AWS provider max_retries. The provider retries "
        "InsufficientInstanceCapacity like throttling (hashicorp/terraform-provider-aws#43193): "
        "with its default of 25 a capacity error takes many minutes to surface, so the "
        "engine's fallback would wait; a few retries keep it to seconds.")
    parallelism: int = Field(50, ge=1, description="terraform -parallelism for plan and apply.")
    shard_size: int = Field(
        50, ge=1, le=10_000, description="Most nodes one Terraform state of a pool takes "
        "before new nodes go to the pool's next shard (its own workspace, state and lock): "
        "every run reads and writes its whole state, so an apply in a big pool would "
        "grow with the pool. A node never moves between shards; changing this only places "
        "new nodes differently.")
    shard_parallelism: int = Field(
        4, ge=1, description="Shards of one pool applied at the same time.")
    refresh: bool = Field(
        False, description="Refresh every instance from the cloud when planning. Off by "
        "default: refresh costs API calls per instance, so plan time would grow with the "
        "pool. Node identity is the map key, and the reconciler reads instance truth from "
        "the cloud (a vanished instance becomes LOST and leaves the map), so a stale state "
        "entry is never recreated behind the store's back. PoolWorkspace.refresh() brings "
        "the state in line when the reconciler asks.")
    plugin_mirror: Path = Field(Path("/opt/tf-plugins"), description="Providers come only from here.")
    modules_dir: ConfigPath = Field(DEFAULT_MODULES_DIR, description="The pool modules' directory.")
    terraform_bin: str = Field("terraform", description="The terraform binary.")
    command_timeout_s: float = Field(1800, gt=0, description="Time limit of one command.")
    lock_timeout: str = Field("0s", description="How long to wait for another run's lock.")

    def inputs_for(self, cloud: str, region: str) -> RegionInputs | None:
        return self.regions.get(f"{cloud}/{region}")


def load_settings(path: Path) -> TerraformSettings:
    """Read settings from YAML or JSON (the ``terraform:`` key of a config file, or the
    settings themselves)."""
    data = YAML(typ="safe").load(Path(path).read_text()) or {}
    if isinstance(data, dict) and "policies_dir" in data and "terraform" not in data:
        # Validating the whole service config as settings would list every other section.
        raise ValueError("a service config without a terraform: section (workdir, backend, "
                         "regions); add one, or give a Terraform settings file")
    if isinstance(data, dict) and isinstance(data.get("terraform"), dict):
        data = data["terraform"]
    try:
        return TerraformSettings.model_validate(data)
    except ValidationError as exc:  # one line: key path and reason, without pydantic's links
        raise ValueError("; ".join(f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}"
                                   for e in exc.errors()[:5])) from None
