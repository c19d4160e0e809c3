"""Terraform actuator: one root module, state and lock per pool; plans saved and applied
exactly as previewed; capacity errors returned as engine input."""

from autoscaler.actuators.terraform.errors import (
    CAPACITY_CODES,
    PlanNotFoundError,
    ProviderUnavailableError,
    StalePlanError,
    StateLockedError,
    TerraformError,
)
from autoscaler.actuators.terraform.planfile import ImageChoice, NodeChange, PoolPlan
from autoscaler.actuators.terraform.rootmodule import BakedImage
from autoscaler.actuators.terraform.settings import (
    LocalBackend,
    RegionInputs,
    S3Backend,
    TerraformSettings,
    load_settings,
)
from autoscaler.actuators.terraform.workspace import ApplyResult, NodeOutput, PoolWorkspace

__all__ = [
    "CAPACITY_CODES",
    "ApplyResult",
    "BakedImage",
    "ImageChoice",
    "LocalBackend",
    "NodeChange",
    "NodeOutput",
    "PlanNotFoundError",
    "PoolPlan",
    "PoolWorkspace",
    "ProviderUnavailableError",
    "RegionInputs",
    "S3Backend",
    "StalePlanError",
    "StateLockedError",
    "TerraformError",
    "TerraformSettings",
    "load_settings",
]
