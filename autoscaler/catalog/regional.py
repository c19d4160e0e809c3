"""Built-in on-demand list prices per region, where they differ by region and are known.

``Catalog.price`` consults this table after the operator's price file and before the
type's default price (``InstanceType.on_demand_usd``, the us-east-1 list price for AWS).
A region missing here falls back to that default, and the fallback is reported by name
("us-east-1 list price used for eu-west-1"), never silently.

Only regions of ``catalog/regions.py`` appear, and only rows that were read: a region
missing from a row may well have a price of its own (us-east-2 and us-west-2 usually equal
us-east-1's). Linux, shared tenancy, USD per hour.

Sources (each row says which):
  [v8] SkyPilot's AWS catalog, generated from the AWS Price List API:
       github.com/skypilot-org/skypilot-catalog catalogs/v8/aws/vms.csv at commit
       e385a0d348eda9cefd9806423e7725944dc249e4 (after AWS's June 2025 P4/P5 price cut:
       p5.48xlarge us-east-1 55.04, was 98.32), read 2026-12-03.
  [v7] The same project's catalogs/v7/aws/vms.csv at commit
       001367d22a0033fac286a8c71aeac7109e431bcb (an older snapshot; G6/G6e were not part
       of that cut; [v8] has the same G6 figures where both were read), read 2026-12-03.
The p5en us-east-1/us-east-2/us-west-2 figure (63.296) also appears in dstack PR #4110
(2026-08-06), whose offers come from the AWS Price List through gpuhunt.
"""

from __future__ import annotations

from collections.abc import Mapping

# Where a cloud's default (region-less) built-in price comes from.
DEFAULT_PRICE_REGION: Mapping[str, str] = {"aws": "us-east-1"}

_US3 = ("us-east-1", "us-east-2", "us-west-2")  # one list price in these three


def _same(price: float, regions: tuple[str, ...] = _US3) -> dict[str, float]:
    return dict.fromkeys(regions, price)


REGIONAL_ON_DEMAND: Mapping[tuple[str, str], Mapping[str, float]] = {
    # [v8]
    ("aws", "p3.2xlarge"): {
        "us-east-1": 3.06, "ap-northeast-1": 4.194, "ap-northeast-2": 4.234,
        "ap-southeast-1": 4.234, "ap-southeast-2": 4.234, "ca-central-1": 3.366,
        "eu-central-1": 3.823, "eu-west-1": 3.305, "eu-west-2": 3.589},
    # [v8]
    ("aws", "p3.8xlarge"): {
        **_same(12.24), "ap-northeast-2": 16.936, "ap-southeast-1": 16.936,
        "ap-southeast-2": 16.936, "ca-central-1": 13.464, "eu-central-1": 15.292,
        "eu-west-1": 13.22, "eu-west-2": 14.356},
    # [v8]
    ("aws", "p3.16xlarge"): {
        **_same(24.48), "ap-northeast-1": 33.552, "ap-northeast-2": 33.872,
        "ap-southeast-1": 33.872, "ap-southeast-2": 33.872, "ca-central-1": 26.928,
        "eu-central-1": 30.584, "eu-west-1": 26.44, "eu-west-2": 28.712},
    # [v8]
    ("aws", "g4dn.xlarge"): {
        "us-east-1": 0.526, "af-south-1": 0.698, "ap-northeast-1": 0.71,
        "ap-northeast-2": 0.647, "ap-northeast-3": 0.71, "ap-south-1": 0.579,
        "ap-southeast-1": 0.736, "ap-southeast-2": 0.684, "ca-central-1": 0.584,
        "eu-central-1": 0.658, "eu-north-1": 0.558, "eu-south-1": 0.616, "eu-west-1": 0.587,
        "eu-west-2": 0.615, "eu-west-3": 0.615, "me-south-1": 0.645},
    # [v8]
    ("aws", "g5.xlarge"): {
        "us-east-1": 1.006, "ap-northeast-1": 1.459, "ap-northeast-2": 1.237,
        "ap-south-1": 1.208, "ap-southeast-2": 1.308, "ca-central-1": 1.117,
        "eu-central-1": 1.258, "eu-north-1": 1.067, "eu-west-1": 1.123, "eu-west-2": 1.277},
    # [v8]
    ("aws", "p4d.24xlarge"): {
        "us-east-1": 21.957642, "us-east-2": 21.95764, "us-west-2": 21.95764,
        "ap-northeast-1": 30.09784, "ap-northeast-2": 30.41028, "ap-south-1": 26.3444,
        "ap-southeast-2": 28.54493, "ca-central-1": 25.25174, "eu-central-1": 27.43298,
        "eu-west-1": 23.71569},
    # [v8]
    ("aws", "p4de.24xlarge"): {
        "us-east-1": 27.44705, "us-west-2": 27.44705, "ap-northeast-1": 37.6223,
        "ap-southeast-1": 32.93646, "eu-central-1": 34.29122},
    # [v8]
    ("aws", "p5.48xlarge"): {
        **_same(55.04), "us-west-1": 68.8, "ap-northeast-1": 68.8, "ap-south-1": 66.048,
        "ap-southeast-2": 71.552, "ca-central-1": 63.296, "eu-north-1": 58.8928,
        "eu-west-2": 71.552},
    # [v8] p5e.48xlarge has no on-demand row in any region (Capacity Blocks only).
    # [v8]
    ("aws", "p5en.48xlarge"): {
        **_same(63.296), "us-west-1": 79.12, "ap-northeast-1": 79.12,
        "ap-northeast-2": 87.34848, "ap-south-1": 75.9552, "eu-north-1": 67.72672},
    # [v7]
    ("aws", "g6.xlarge"): {
        **_same(0.8048), "ap-northeast-1": 1.1672, "ap-northeast-2": 0.9896,
        "ap-south-1": 0.9664, "ap-southeast-2": 1.0464, "ca-central-1": 0.8936,
        "eu-central-1": 1.0064, "eu-north-1": 0.8536, "eu-west-2": 1.0216,
        "eu-west-3": 1.0216},
    # [v7]
    ("aws", "g6.2xlarge"): {
        **_same(0.9776), "ap-northeast-1": 1.41781, "ap-northeast-2": 1.20208,
        "ap-south-1": 1.1739, "ap-southeast-2": 1.27107, "ca-central-1": 1.08547,
        "eu-central-1": 1.22249, "eu-north-1": 1.03688, "eu-west-2": 1.24095,
        "eu-west-3": 1.24095},
    # [v7]
    ("aws", "g6.48xlarge"): {
        **_same(13.3504), "ap-northeast-1": 19.36206, "ap-northeast-2": 16.41595,
        "ap-south-1": 16.0311, "ap-southeast-2": 17.35817, "ca-central-1": 14.82346,
        "eu-central-1": 16.69464, "eu-north-1": 14.15992, "eu-west-2": 16.94678,
        "eu-west-3": 16.94678},
    # [v7]
    ("aws", "g6e.xlarge"): {
        **_same(1.861), "ap-northeast-1": 2.699, "ap-northeast-2": 2.288,
        "eu-central-1": 2.327, "eu-north-1": 1.974},
    # [v7]
    ("aws", "g6e.12xlarge"): {
        **_same(10.49264), "ap-northeast-1": 15.21742, "ap-northeast-2": 12.90014,
        "eu-central-1": 13.12002, "eu-north-1": 11.12975},
}


def regional_on_demand(cloud: str, name: str, region: str) -> float | None:
    """The built-in list price of ``name`` in ``region``; None when the table has none."""
    return REGIONAL_ON_DEMAND.get((cloud, name), {}).get(region)
