"""Regions and zones a pool may name, per cloud.

A region reaches Terraform's provider block and the clouds' API clients, a zone the node
map: both must be names the cloud really has, so a typo is refused at validation rather than
found by a failing apply. Zones are listed as the suffixes each region has (AWS:
``us-east-1`` + ``a`` = ``us-east-1a``; Alibaba Cloud: ``cn-hangzhou`` + ``-h``). The lists
are the public ones of late 2026; a region missing here is added in this file.
"""

from __future__ import annotations

_AWS: dict[str, str] = {
    # region: zone letters
    "us-east-1": "abcdef", "us-east-2": "abc", "us-west-1": "abc", "us-west-2": "abcd",
    "ca-central-1": "abd", "eu-west-1": "abc", "eu-west-2": "abc", "eu-west-3": "abc",
    "eu-central-1": "abc", "eu-north-1": "abc", "eu-south-1": "abc",
    "ap-northeast-1": "acd", "ap-northeast-2": "abcd", "ap-northeast-3": "abc",
    "ap-southeast-1": "abc", "ap-southeast-2": "abc", "ap-south-1": "abc",
    "sa-east-1": "abc", "me-south-1": "abc", "af-south-1": "abc",
}
_ALICLOUD: dict[str, str] = {
    # region: zone letters (zones are "<region>-<letter>")
    "cn-hangzhou": "bghijk", "cn-shanghai": "abcdefgl", "cn-beijing": "acefghijkl",
    "cn-shenzhen": "acdef", "cn-zhangjiakou": "abc", "cn-qingdao": "bc",
    "cn-hongkong": "bcd", "ap-southeast-1": "abc", "us-west-1": "ab", "us-east-1": "ab",
    "eu-central-1": "ab", "ap-northeast-1": "abc",
}


def _zones(cloud: str, region: str, letters: str) -> tuple[str, ...]:
    sep = "" if cloud == "aws" else "-"
    return tuple(f"{region}{sep}{letter}" for letter in letters)


REGIONS: dict[str, dict[str, tuple[str, ...]]] = {
    "aws": {r: _zones("aws", r, z) for r, z in _AWS.items()},
    "alicloud": {r: _zones("alicloud", r, z) for r, z in _ALICLOUD.items()},
}


def region_problem(cloud: str, region: str) -> str | None:
    known = REGIONS.get(cloud, {})
    if region in known:
        return None
    return (f"'{region}' is not a region of {cloud} in the catalog "
            f"(known: {', '.join(sorted(known))})")


def zone_problem(cloud: str, region: str, zone: str) -> str | None:
    zones = REGIONS.get(cloud, {}).get(region)
    if zones is None or zone in zones:
        return None  # an unknown region is reported once, on the region
    return f"zone '{zone}' is not in region '{region}' of {cloud} (known: {', '.join(zones)})"
