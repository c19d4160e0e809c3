"""Team policy files: models, loading with file:line errors, JSON Schema."""

from autoscaler.policy.errors import PolicyError, PolicyLoadError
from autoscaler.policy.loader import load_dir, load_file, load_policies
from autoscaler.policy.models import (
    Cloud,
    Market,
    Pool,
    Priority,
    TeamPolicy,
    pool_key,
)
from autoscaler.policy.schema import json_schema

__all__ = [
    "Cloud",
    "Market",
    "PolicyError",
    "PolicyLoadError",
    "Pool",
    "Priority",
    "TeamPolicy",
    "json_schema",
    "load_dir",
    "load_file",
    "load_policies",
    "pool_key",
]
