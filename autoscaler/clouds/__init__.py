"""Read-only cloud adapters (boto3, aliyun-python-sdk-ecs) behind one Protocol.

``connect(cloud, region, ...)`` builds the adapter for a pool's cloud; both return the
records of :mod:`autoscaler.clouds.base`.
"""

from __future__ import annotations

from autoscaler.catalog import Catalog
from autoscaler.clouds.base import (
    MANAGED_TAGS,
    CloudApiError,
    CloudAuthError,
    CloudDataError,
    CloudError,
    CloudInstance,
    CloudMarket,
    CloudUnreachableError,
    InstanceState,
    Interruption,
    InterruptionKind,
    SpotPrice,
    ZoneOffering,
    latest_spot,
)


def connect(cloud: str, region: str, *, endpoint: str | None = None,
            catalog: Catalog | None = None, read_timeout: float | None = None) -> CloudMarket:
    """The adapter for ``cloud`` in ``region``; ``endpoint`` overrides the API endpoint,
    ``read_timeout`` (seconds) the AWS adapter's."""
    if cloud == "aws":
        from autoscaler.clouds.aws import AwsCloud, AwsSettings

        settings = AwsSettings(endpoint_url=endpoint, read_timeout=AwsSettings.read_timeout
                               if read_timeout is None else read_timeout)
        return AwsCloud(region, settings=settings, catalog=catalog)
    if cloud == "alicloud":
        from autoscaler.clouds.alicloud import AlicloudCloud, AlicloudSettings

        return AlicloudCloud(region, settings=AlicloudSettings(endpoint=endpoint))
    raise CloudError(f"unknown cloud {cloud!r} (aws | alicloud)")


__all__ = [
    "MANAGED_TAGS",
    "CloudApiError",
    "CloudAuthError",
    "CloudDataError",
    "CloudError",
    "CloudInstance",
    "CloudMarket",
    "CloudUnreachableError",
    "InstanceState",
    "Interruption",
    "InterruptionKind",
    "SpotPrice",
    "ZoneOffering",
    "connect",
    "latest_spot",
]
