"""AWS: whose credentials these are, whether they may launch and terminate what the pools
would (EC2 ``DryRun``: nothing is created or ended) and ask Spot placement scores when
those are on, and the spot-notice queues (their attributes only: receiving would take
notices away from the service)."""

from __future__ import annotations

from typing import Any

from autoscaler.clouds import MANAGED_TAGS, CloudError
from autoscaler.clouds.aws import MIN_SCORED_TYPES, AwsCloud, AwsSettings, scorable
from autoscaler.policy.models import Pool
from autoscaler.service.doctor.context import Context
from autoscaler.service.doctor.report import Result, fail, ok, skip

# An id no instance has, for the terminate DryRun when the pool has no instance yet.
NO_INSTANCE = "i-00000000000000000"
EVENTS = "events.amazonaws.com"


def _regions(ctx: Context) -> dict[str, list[Pool]]:
    out: dict[str, list[Pool]] = {}
    for _, pool in ctx.pools():
        if pool.cloud.value == "aws":
            out.setdefault(pool.region, []).append(pool)
    return dict(sorted(out.items()))


def _cloud(ctx: Context, region: str, queue_url: str | None = None) -> AwsCloud:
    aws = ctx.config.clouds.aws
    # Short and without retries: the check's deadline is 10 s for all of its calls.
    return AwsCloud(region, catalog=ctx.catalog, settings=AwsSettings(
        endpoint_url=aws.endpoint_url, queue_url=queue_url, connect_timeout=2,
        read_timeout=4, max_attempts=1))


def credentials(ctx: Context) -> list[Result]:
    """STS GetCallerIdentity with the standard credential chain; the account must be the
    one the config names (``clouds.aws.account_id``) when it names one."""
    regions = _regions(ctx)
    if not regions:
        return [skip("aws credentials", "no AWS pool")]
    region = next(iter(regions))
    try:
        account = _cloud(ctx, region).account_id()
    except CloudError as exc:
        return [fail("aws credentials", str(exc))]
    wanted = ctx.config.clouds.aws.account_id
    if wanted is not None and wanted != account:
        return [fail("aws credentials", f"the credentials are account {account}, "
                                        f"clouds.aws.account_id is {wanted}")]
    return [ok("aws credentials", f"account {account} (sts GetCallerIdentity in {region})")]


def ec2(ctx: Context) -> list[Result]:
    """Per region: RunInstances of the pools' first type with the region's Terraform
    inputs (AMI, subnet, security groups, key, instance profile, our tags), and
    TerminateInstances of one of our instances, both with ``DryRun``."""
    regions = _regions(ctx)
    if not regions:
        return [skip("ec2", "no AWS pool")]
    rows = []
    for region, pools in regions.items():
        rows += _region_rights(ctx, region, pools)
    return rows


def _region_rights(ctx: Context, region: str, pools: list[Pool]) -> list[Result]:
    launch, end = f"ec2 launch {region}", f"ec2 terminate {region}"
    inputs = ctx.config.terraform.inputs_for("aws", region)
    if inputs is None:
        why = f"no terraform.regions[aws/{region}] inputs (ami...): the pools cannot be planned"
        return [fail(launch, why), skip(end, "no launch inputs")]
    itype = pools[0].instance_types[0]
    params: dict[str, Any] = {
        "ImageId": inputs.ami, "InstanceType": itype, "MinCount": 1, "MaxCount": 1,
        "TagSpecifications": [{"ResourceType": "instance", "Tags": [
            {"Key": k, "Value": v} for k, v in MANAGED_TAGS.items()]}]}
    if inputs.subnet_ids:
        params["SubnetId"] = inputs.subnet_ids[0]
    if inputs.security_group_ids:
        params["SecurityGroupIds"] = inputs.security_group_ids
    if inputs.key_name:
        params["KeyName"] = inputs.key_name
    if inputs.iam_instance_profile:
        profile = inputs.iam_instance_profile
        params["IamInstanceProfile"] = {"Arn" if profile.startswith("arn:") else "Name": profile}
    cloud = _cloud(ctx, region)
    rows = [_dry_run(cloud, launch, "run_instances", f"{itype} from {inputs.ami}", params)]
    try:
        ours = cloud.managed_instances()
    except CloudError as exc:
        return [*rows, fail(end, f"cannot list our instances: {exc}")]
    target = ours[0].instance_id if ours else NO_INSTANCE
    what = f"our instance {target}" if ours else f"{NO_INSTANCE} (no instance of ours yet)"
    rows.append(_dry_run(cloud, end, "terminate_instances", what, {"InstanceIds": [target]}))
    return rows


def _dry_run(cloud: AwsCloud, name: str, operation: str, what: str,
             params: dict[str, Any], hint: str = "") -> Result:
    try:
        allowed = cloud.allowed(operation, **params)
    except CloudError as exc:
        return fail(name, str(exc))
    if not allowed:
        return fail(name, f"{operation} of {what} is not allowed for these credentials "
                          f"(UnauthorizedOperation){hint}")
    return ok(name, f"{operation} of {what} allowed (DryRun)")


def spot_scores(ctx: Context) -> list[Result]:
    """With ``clouds.aws.spot_placement_scores`` on: per region, GetSpotPlacementScores of
    the first pool that is scored (zones and at least three types), with ``DryRun``."""
    if not ctx.config.clouds.aws.spot_placement_scores:
        return [skip("spot scores", "clouds.aws.spot_placement_scores is off")]
    rows = []
    for region, pools in _regions(ctx).items():
        name = f"spot scores {region}"
        scored = [p for p in pools if p.zones and scorable(p.instance_types)]
        if not scored:
            rows.append(skip(name, f"no pool lists zones and {MIN_SCORED_TYPES} or more instance "
                                   "types (AWS scores fewer types as always low): none is asked"))
            continue
        cloud = _cloud(ctx, region)
        request = cloud.spot_score_request(scored[0].instance_types)
        rows.append(_dry_run(cloud, name, "get_spot_placement_scores",
                             ", ".join(request["InstanceTypes"]), request,
                             hint=": grant ec2:GetSpotPlacementScores (the controller module's "
                                  "policy has it) or turn clouds.aws.spot_placement_scores off"))
    return rows or [skip("spot scores", "no AWS pool")]


def queues(ctx: Context) -> list[Result]:
    """Per region with spot capacity: the interruption queue exists, is readable, and its
    policy lets EventBridge send to it. Its messages are counted, never received."""
    aws = ctx.config.clouds.aws
    spot = {region for region, pools in _regions(ctx).items()
            if any(p.capacity.spot_percent > 0 for p in pools)}
    regions = sorted(spot | set(aws.sqs_queue_urls))
    if not regions:
        return [skip("sqs", "no AWS spot pool and no clouds.aws.sqs_queue_urls")]
    rows = []
    for region in regions:
        url = aws.sqs_queue_urls.get(region)
        if url is None:
            rows.append(fail(f"sqs {region}", "spot pools here but no clouds.aws.sqs_queue_urls"
                                              f"[{region}]: spot notices would be missed"))
            continue
        rows.append(_queue(_cloud(ctx, region, url), f"sqs {region}", url))
    return rows


def _queue(cloud: AwsCloud, name: str, url: str) -> Result:
    try:
        attrs = cloud.queue_attributes(["QueueArn", "ApproximateNumberOfMessages", "Policy"])
    except CloudError as exc:
        return fail(name, str(exc))
    if "QueueArn" not in attrs:
        return fail(name, f"{url}: answered without the queue's attributes (not an SQS "
                          "endpoint?)")
    if EVENTS not in attrs.get("Policy", ""):
        return fail(name, f"{url}: the queue policy does not let EventBridge ({EVENTS}) send "
                          "to it: no spot notice would arrive")
    waiting = attrs.get("ApproximateNumberOfMessages", "?")
    return ok(name, f"{attrs.get('QueueArn', url)}: readable, EventBridge may send; "
                    f"{waiting} message(s) waiting")
