"""Patches that make moto 5.2 behave like EC2 for the sandbox's GPU pools.

Loaded in the moto server process before it serves (``python -m
autoscaler.sandbox.services.moto_server``), never in the product:

1. p3 types are missing from moto's instance catalog, and the AWS provider calls
   DescribeInstanceTypes on every read, so an apply fails and taints the resource.
2. ``RunInstances`` with spot ``InstanceMarketOptions`` registers no spot request, so the
   provider sees no ``SpotInstanceRequestId`` and every plan replaces every spot node. The
   request keeps the type and interruption behaviour asked for: read back as
   one-time/terminate, every plan of a persistent request would replace its instance.
3. A fault file makes chosen (type, zone, market) launches fail with a capacity error code,
   the way EC2 does when it is out of stock.
4. A resource's tags are read by scanning every tag of the region (moto's describe_tags
   with a resource-id filter), once per instance a filter or a response touches: a
   DescribeInstances over 1,000 tagged instances took 20 s, so the 1,000-node scale
   scenario timed out against it. They are read from the resource's own entry instead.
5. ``RunInstances`` ignores its ``ClientToken``. The SDKs (botocore, the Go SDK under the
   AWS provider) fill one in and keep it across their retries, and EC2 answers a repeated
   token with the reservation it made the first time. moto made a second instance
   instead: a retry under load left an instance no state held (seen once in CI, a
   baked pool's node still running after ``terraform destroy``).
6. ``CreateImage`` made a second image of the same name. It has no token; EC2 refuses a
   name already in use in the region (``InvalidAMIName.Duplicate``). Here a repeat of the
   same name from the same instance gets the first image back: in the sandbox such a
   repeat is only an SDK retry of an answer moto lost under load (seen once in CI: an
   image with the bake's hash that no state held), which EC2 would not have lost.
   Another instance's image under a used name is refused, as by EC2.
7. ``GetSpotPlacementScores`` is not answered by moto. A score file (zone names and
   scores, read on every request so tests can change it) is served as EC2 shapes it: zone
   ids rather than names, ``MaxResults``/``NextToken`` paging, ``DryRunOperation`` for a
   DryRun. With no file or an empty one the answer holds no rows.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from autoscaler.sandbox.services.moto_server import read_rows

# (name, vCPU, MiB, GPUs): the p3 family as sold; shape copied from p3dn.24xlarge.
_P3_TYPES = (("p3.2xlarge", 8, 62464, 1), ("p3.8xlarge", 32, 249856, 4),
             ("p3.16xlarge", 64, 499712, 8))


def add_p3_types() -> None:
    from moto.ec2.models import instance_types as it

    base = it.INSTANCE_TYPES["p3dn.24xlarge"]
    for name, vcpu, mib, gpus in _P3_TYPES:
        if name in it.INSTANCE_TYPES:
            continue
        entry = copy.deepcopy(base)
        entry["InstanceType"] = name
        entry["VCpuInfo"].update(DefaultVCpus=vcpu, DefaultCores=vcpu // 2,
                                 ValidCores=list(range(2, vcpu // 2 + 1, 2)))
        entry["MemoryInfo"] = {"SizeInMiB": mib}
        entry["GpuInfo"] = {
            "Gpus": [{"Count": gpus, "Manufacturer": "NVIDIA", "Name": "V100",
                      "MemoryInfo": {"SizeInMiB": 16384}}],
            "TotalGpuMemoryInMiB": 16384 * gpus,
        }
        entry["InstanceStorageSupported"] = False
        entry.pop("InstanceStorageInfo", None)
        it.INSTANCE_TYPES[name] = entry
        it.InstanceTypeBackend.instance_types.append(it.InstanceType(name))
        _add_offerings(it.INSTANCE_TYPE_OFFERINGS, name)


def _add_offerings(offerings: dict[str, dict[str, list[dict[str, Any]]]], name: str) -> None:
    """Offer ``name`` wherever p3dn.24xlarge (or, failing that, g4dn.xlarge) is offered."""
    for location_type, regions in offerings.items():
        for rows in regions.values():
            locations = sorted({r["Location"] for r in rows
                                if r["InstanceType"] in ("p3dn.24xlarge", "g4dn.xlarge")})
            rows.extend({"InstanceType": name, "Location": loc, "LocationType": location_type}
                        for loc in locations)


def _make_spot_request_class() -> type:
    from moto.ec2.models.spot_requests import SpotInstanceRequest

    class AdoptedSpotRequest(SpotInstanceRequest):
        """A fulfilled spot request for an instance RunInstances already made."""

        def __init__(self, ec2_backend: Any, request_id: str, instance: Any,
                     max_price: str | None, spot_type: str | None = None,
                     behavior: str | None = None) -> None:
            self._adopted = instance
            super().__init__(
                ec2_backend, request_id, max_price or "", instance.image_id,
                spot_type or "one-time", None, None, None, None, instance.key_name, [], None,
                instance.instance_type, instance.placement, None, None, False,
                instance.subnet_id, {}, None, behavior or "terminate",
            )

        def launch_instance(self) -> Any:
            return self._adopted

    # moto's serializer and tagging look classes up by module.
    AdoptedSpotRequest.__module__ = "moto.ec2.models.spot_requests"
    return AdoptedSpotRequest


def _rules(path: Path | None) -> list[dict[str, Any]]:
    """The rules a test wrote to ``path``, read on every request so they can change between
    two calls."""
    return [] if path is None else read_rows(path)


class _Faults:
    """Capacity faults read from a JSON file on every launch (so tests can flip them)."""

    def __init__(self, path: Path | None):
        self.path = path

    def match(self, instance_type: str, zone: str, market: str) -> dict[str, str] | None:
        for rule in _rules(self.path):
            if (rule.get("instance_type") in ("", None, instance_type)
                    and rule.get("zone") in ("", None, zone)
                    and rule.get("market") in ("", None, market)):
                return dict(rule)
        return None


def _launch_zone(response: Any) -> str:
    zone = response._get_param("Placement.AvailabilityZone")
    if zone:
        return str(zone)
    subnet_id = response._get_param("SubnetId")
    if subnet_id:
        return str(response.ec2_backend.get_subnet(subnet_id).availability_zone)
    return f"{response.region}a"


def patch_run_instances(fault_file: Path | None) -> None:
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.responses.instances import InstanceResponse
    from moto.ec2.utils import random_spot_request_id

    original = InstanceResponse.run_instances
    if getattr(original, "_gpu_autoscaler", False):
        return
    spot_request_cls = _make_spot_request_class()
    faults = _Faults(fault_file)

    def run_instances(self: Any) -> Any:
        token = self._get_param("ClientToken")
        if token:
            for reservation in list(self.ec2_backend.reservations.values()):
                if any(i.client_token == token for i in reservation.instances):
                    return ActionResult(reservation)
        market = "spot" if self._get_param("InstanceMarketOptions.MarketType") == "spot" \
            else "on-demand"
        itype = self._get_param("InstanceType", "m1.small")
        zone = _launch_zone(self)
        fault = faults.match(itype, zone, market)
        if fault is not None:
            code = fault.get("code") or "InsufficientInstanceCapacity"
            raise EC2ClientError(code, f"We currently do not have sufficient {itype} capacity "
                                 f"in the Availability Zone you requested ({zone}) "
                                 f"for {market} instances.")
        result = original(self)
        if market == "spot":
            max_price = self._get_param("InstanceMarketOptions.SpotOptions.MaxPrice")
            spot_type = self._get_param("InstanceMarketOptions.SpotOptions.SpotInstanceType")
            behavior = self._get_param(
                "InstanceMarketOptions.SpotOptions.InstanceInterruptionBehavior")
            for instance in getattr(result.result, "instances", []):
                request = spot_request_cls(self.ec2_backend, random_spot_request_id(),
                                           instance, max_price, spot_type, behavior)
                self.ec2_backend.spot_instance_requests[request.id] = request
                instance.spot_instance_request_id = request.id
                instance.lifecycle = "spot"
        return result

    run_instances._gpu_autoscaler = True  # type: ignore[attr-defined]
    InstanceResponse.run_instances = run_instances  # type: ignore[method-assign]


# Batch calls AWS authorizes under the single call's action (the IAM service reference
# lists no sqs:*Batch actions); moto checks them under their own names.
IAM_ACTION_OF_BATCH = {
    "sqs:DeleteMessageBatch": "sqs:DeleteMessage",
    "sqs:SendMessageBatch": "sqs:SendMessage",
    "sqs:ChangeMessageVisibilityBatch": "sqs:ChangeMessageVisibility",
}


def patch_iam_batch_actions() -> None:
    """Check batch calls against the action AWS checks, so a policy that works on AWS works
    here under IAM enforcement (off unless a test turns it on: MotoSandbox.enforce_iam)."""
    from moto.iam.access_control import IAMRequestBase

    original = IAMRequestBase.check_action_permitted
    if getattr(original, "_gpu_autoscaler", False):
        return

    def check_action_permitted(self: Any, resource: str) -> None:
        self._action = IAM_ACTION_OF_BATCH.get(self._action, self._action)
        original(self, resource)

    check_action_permitted._gpu_autoscaler = True  # type: ignore[attr-defined]
    IAMRequestBase.check_action_permitted = check_action_permitted  # type: ignore[method-assign]


def patch_tag_lookup() -> None:
    """A resource's tags from its own entry: the same records moto's describe_tags gives for
    a resource-id filter, without a scan of every tag (quadratic over a describe)."""
    from moto.ec2.models.core import TaggedEC2Resource
    from moto.ec2.utils import EC2_PREFIX_TO_RESOURCE, get_prefix

    if getattr(TaggedEC2Resource.get_tags, "_gpu_autoscaler", False):
        return

    def get_tags(self: Any) -> list[dict[str, str]]:
        if not self.id:
            return []
        kind = EC2_PREFIX_TO_RESOURCE.get(get_prefix(self.id), "")
        return [{"resource_id": self.id, "key": key, "value": value, "resource_type": kind}
                for key, value in dict(self.ec2_backend.tags.get(self.id, {})).items()]

    get_tags._gpu_autoscaler = True  # type: ignore[attr-defined]
    TaggedEC2Resource.get_tags = get_tags  # type: ignore[method-assign]


def patch_create_image() -> None:
    from moto.ec2.exceptions import EC2ClientError
    from moto.ec2.models.amis import AmiBackend

    original = AmiBackend.create_image
    if getattr(original, "_gpu_autoscaler", False):
        return

    def create_image(self: Any, instance_id: str, name: str, *args: Any, **kwargs: Any) -> Any:
        for ami in list(self.amis.values()):
            if ami.name == name and ami.owner_id == self.account_id:
                if ami.instance_id == instance_id:
                    return ami
                raise EC2ClientError("InvalidAMIName.Duplicate",
                                     f"AMI name {name} is already in use by AMI {ami.id}")
        return original(self, instance_id, name, *args, **kwargs)

    create_image._gpu_autoscaler = True  # type: ignore[attr-defined]
    AmiBackend.create_image = create_image  # type: ignore[method-assign]


def spot_placement_scores_answer(handler: Any, rows: list[dict[str, Any]]) -> Any:
    """One page of ``rows`` as EC2 answers GetSpotPlacementScores: ``DryRunOperation`` to a
    DryRun (the caller is allowed, or moto's IAM check would have refused before), else
    ``MaxResults`` rows (10 by default) from ``NextToken``, with the next token if more."""
    from moto.core.responses import ActionResult
    from moto.ec2.exceptions import EC2ClientError

    if handler._get_bool_param("DryRun"):
        raise EC2ClientError("DryRunOperation",
                             "Request would have succeeded, but DryRun flag is set.")
    size = int(handler._get_param("MaxResults") or 10)
    start = int(handler._get_param("NextToken") or 0)
    result: dict[str, Any] = {"SpotPlacementScores": rows[start:start + size]}
    if start + size < len(rows):
        result["NextToken"] = str(start + size)
    return ActionResult(result)


def score_rows(rules: list[dict[str, Any]], handler: Any) -> list[dict[str, Any]]:
    """The answer's rows for one request. A rule ``{"region", "zone", "score",
    "instance_types"?}`` counts when the request asks its region (or no region) and, if it
    names types, exactly those types, since AWS scores the set asked for, not each type. Per
    zone, rows carry the zone's id; per region (``SingleAvailabilityZone`` false), the
    region's best zone."""
    types = set(handler._get_param("InstanceTypes", []))
    regions = set(handler._get_param("RegionNames", []))
    single = handler._get_bool_param("SingleAvailabilityZone")
    best: dict[tuple[str, str], int] = {}
    for rule in rules:
        region, zone, score = rule.get("region"), rule.get("zone"), rule.get("score")
        if not isinstance(region, str) or not isinstance(score, int):
            continue
        if (regions and region not in regions) or (
                rule.get("instance_types") and set(rule["instance_types"]) != types):
            continue
        ids = {z.name: z.zone_id for z in handler.ec2_backend.zones.get(region, [])}
        if single and zone not in ids:
            continue
        key = (region, ids[zone] if single else "")
        best[key] = max(score, best.get(key, 0))
    return [{"Region": region, "AvailabilityZoneId": zone_id, "Score": score} if single
            else {"Region": region, "Score": score}
            for (region, zone_id), score in sorted(best.items())]


def patch_spot_placement_scores(score_file: Path | None) -> None:
    from moto.ec2.responses.spot_instances import SpotInstances

    if getattr(getattr(SpotInstances, "get_spot_placement_scores", None), "_gpu_autoscaler",
               False):
        return

    def get_spot_placement_scores(self: Any) -> Any:
        return spot_placement_scores_answer(self, score_rows(_rules(score_file), self))

    get_spot_placement_scores._gpu_autoscaler = True  # type: ignore[attr-defined]
    SpotInstances.get_spot_placement_scores = get_spot_placement_scores  # type: ignore[attr-defined]


def apply_all(fault_file: Path | None, score_file: Path | None = None) -> None:
    add_p3_types()
    patch_tag_lookup()
    patch_run_instances(fault_file)
    patch_create_image()
    patch_iam_batch_actions()
    patch_spot_placement_scores(score_file)
