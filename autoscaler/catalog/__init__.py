"""Instance types per cloud: GPUs, GPU model and memory, vCPU, RAM, $/h, spot discount."""

from autoscaler.catalog.catalog import (
    Catalog,
    CatalogError,
    InstanceType,
    MissingPriceError,
    Price,
    UnknownInstanceTypeError,
    default_catalog,
    load_catalog,
)

__all__ = [
    "Catalog",
    "CatalogError",
    "InstanceType",
    "MissingPriceError",
    "Price",
    "UnknownInstanceTypeError",
    "default_catalog",
    "load_catalog",
]
