"""AWS market data and instance truth through boto3 (read-only).

Credentials come only from boto3's standard chain (environment, profile, instance role)
and are never logged. ``endpoint_url`` points every client at another endpoint (moto in
tests and the sandbox). Spot prices and offerings are cached with a TTL: they change
over minutes, and a tick every few seconds must not turn into an API call every few
seconds.
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import boto3
import botocore.exceptions as bex
from botocore.config import Config
from botocore.parsers import ResponseParserError

from autoscaler.bounded import Bound, Overran, sdk_call_limit
from autoscaler.catalog import Catalog, default_catalog
from autoscaler.clouds.aws_bounded import BoundedClient
from autoscaler.clouds.aws_events import Trust
from autoscaler.clouds.aws_pricelist import PriceListReader, PriceListSettings
from autoscaler.clouds.aws_queue import SqsInterruptionQueue
from autoscaler.clouds.base import (
    LIVE_STATES,
    MANAGED_TAGS,
    CloudApiError,
    CloudAuthError,
    CloudDataError,
    CloudError,
    CloudInstance,
    CloudUnreachableError,
    InstanceState,
    Interruption,
    MachineImage,
    SpotPrice,
    TtlCache,
    ZoneOffering,
)
from autoscaler.model.clock import Clock, utc_now
from autoscaler.policy.models import Market

log = logging.getLogger(__name__)

# AWS: "If you specify one or two instance types ... the returned placement score will
# always be low", so a set of fewer types is not scored at all.
MIN_SCORED_TYPES = 3


def scorable(types: Iterable[str]) -> bool:
    """Whether a set of instance types is asked for a Spot placement score."""
    return len(set(types)) >= MIN_SCORED_TYPES

CREDENTIALS_HINT = (
    "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE, or run with an "
    "instance role)"
)
_AUTH_CODES = {
    "AuthFailure", "UnauthorizedOperation", "InvalidClientTokenId", "SignatureDoesNotMatch",
    "ExpiredToken", "AccessDenied", "AccessDeniedException", "InvalidAccessKeyId",
}
_UNREACHABLE = (bex.EndpointConnectionError, bex.ConnectTimeoutError, bex.ReadTimeoutError,
                bex.ConnectionClosedError)
# An AMI id as AWS makes them (ami- and 8 or 17 hex digits); anything else in an answer is
# not used (it would end up in a launch and in messages).
_IMAGE_ID = re.compile(r"ami-[0-9a-f]{8,32}")
_STATE_NAMES = frozenset(state.value for state in InstanceState)
_NOT_AWS = (ResponseParserError, ValueError, KeyError, AttributeError, TypeError, RecursionError)


@dataclass(frozen=True)
class AwsSettings:
    endpoint_url: str | None = None
    queue_url: str | None = None  # SQS queue the EventBridge interruption rules feed
    dead_letter_url: str | None = None  # where refused queue messages go (else: deleted)
    # Whose notices are obeyed: the fleet's account (None: STS GetCallerIdentity's, asked
    # once) and these regions (empty: the adapter's own).
    account_id: str | None = None
    notice_regions: frozenset[str] = frozenset()
    spot_ttl: timedelta = timedelta(minutes=5)
    offerings_ttl: timedelta = timedelta(minutes=30)
    spot_lookback: timedelta = timedelta(hours=3)
    product_descriptions: tuple[str, ...] = ("Linux/UNIX",)
    spot_page_size: int = 1000
    instances_page_size: int = 1000
    connect_timeout: float = 3
    read_timeout: float = 10
    max_attempts: int = 2
    sqs_wait_seconds: int = 1
    # The Price List bulk offer file ("{region}" filled in; aws_pricelist.DEFAULT_URL is
    # AWS's). None: on-demand prices come from the catalog and the price file only.
    price_list_url: str | None = None
    price_list_ttl: timedelta = timedelta(hours=24)
    # Spot placement scores (GetSpotPlacementScores) per pool's set of types: off unless the
    # operator turns them on (they need ec2:GetSpotPlacementScores; AWS may limit how many
    # new request configurations an account asks for in 24 h, so each set is asked with the
    # same target capacity every time, and kept for spot_score_ttl).
    spot_scores: bool = False
    spot_score_ttl: timedelta = timedelta(minutes=10)
    spot_score_capacity: int = 1


@contextlib.contextmanager
def aws_errors(what: str, endpoint: str | None) -> Iterator[None]:
    """Turn botocore's many exceptions into the few the callers handle."""
    try:
        yield
    except (bex.NoCredentialsError, bex.PartialCredentialsError):
        raise CloudAuthError(f"{what}: no AWS credentials: {CREDENTIALS_HINT}") from None
    except bex.ClientError as exc:
        err = exc.response.get("Error", {})
        code, message = str(err.get("Code", "?")), str(err.get("Message", ""))
        if code in _AUTH_CODES:
            raise CloudAuthError(f"{what}: AWS rejected the credentials ({code}): "
                                 f"{CREDENTIALS_HINT}") from None
        raise CloudApiError(code, f"{what}: {message}") from None
    except _UNREACHABLE as exc:
        where = endpoint or "the AWS endpoint"
        raise CloudUnreachableError(f"{what}: cannot reach {where}: {exc}") from None
    except Overran as exc:
        where = endpoint or "the AWS endpoint"
        why = ("is still sending the answer to a call that overran its time: nothing sent"
               if exc.still_running else f"did not finish its answer within {exc.limit:g}s")
        raise CloudUnreachableError(f"{what}: {where} {why}") from None
    except bex.BotoCoreError as exc:
        raise CloudError(f"{what}: {exc}") from None
    except _NOT_AWS as exc:
        # botocore's parsers raise these (not BotoCoreError) on an answer that is not an
        # AWS response: a proxy's HTML, bytes, JSON of another shape or depth.
        where = endpoint or "the AWS endpoint"
        raise CloudDataError(f"{what}: {where} answered something that is not an AWS "
                             f"response ({type(exc).__name__})") from None


class AwsCloud:
    """:class:`autoscaler.clouds.base.CloudMarket` for one AWS region."""

    cloud = "aws"

    def __init__(self, region: str, *, settings: AwsSettings | None = None,
                 catalog: Catalog | None = None, clock: Clock = utc_now,
                 session: boto3.Session | None = None):
        self.region = region
        self.settings = settings or AwsSettings()
        self.catalog = catalog or default_catalog()
        self.clock = clock
        self._session = session or boto3.Session(region_name=region)
        self._clients: dict[str, BoundedClient] = {}
        self._bound = Bound("aws-call")  # per service: at most one call left running past its time
        self._spot: TtlCache[str, list[SpotPrice]] = TtlCache(self.settings.spot_ttl, clock)
        self._offered: TtlCache[str, frozenset[str]] = TtlCache(self.settings.offerings_ttl, clock)
        self._zones: TtlCache[str, dict[str, str]] = TtlCache(self.settings.offerings_ttl, clock)
        self._scores: TtlCache[tuple[str, ...], dict[str, int]] = TtlCache(
            self.settings.spot_score_ttl, clock)
        self.api_calls: dict[str, int] = {}  # per operation, for status and tests
        self._account: str | None = self.settings.account_id
        self.price_list = None if self.settings.price_list_url is None else PriceListReader(
            region, self.catalog, PriceListSettings(url=self.settings.price_list_url,
                                                    ttl=self.settings.price_list_ttl),
            clock=clock)

    # -- plumbing ---------------------------------------------------------------
    def call_limit(self, service: str) -> float:
        """The longest one API call (one page of a listing) to ``service`` may take before it
        is given up on (botocore's timeouts bound each socket read, not the answer): per
        attempt the connect timeout and twice the read timeout (plus the long poll's wait for
        SQS), and botocore's longest backoff before each retry; 52 s by default, 54 s for SQS."""
        s = self.settings
        wait = s.sqs_wait_seconds if service == "sqs" else 0
        return sdk_call_limit(s.connect_timeout, s.read_timeout, s.max_attempts, wait)

    def _client(self, service: str) -> Any:
        if service not in self._clients:
            if self._session.get_credentials() is None:
                raise CloudAuthError(f"no AWS credentials found: {CREDENTIALS_HINT}")
            s = self.settings
            config = Config(connect_timeout=s.connect_timeout, read_timeout=s.read_timeout,
                            retries={"max_attempts": s.max_attempts, "mode": "standard"})
            raw = self._session.client(service, region_name=self.region,
                                       endpoint_url=s.endpoint_url, config=config)
            self._clients[service] = BoundedClient(raw, self._bound, service,
                                                   self.call_limit(service))
        return self._clients[service]

    def _pages(self, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        client = self._client("ec2")
        with aws_errors(f"ec2 {operation} in {self.region}", self.settings.endpoint_url):
            for page in client.pages(operation, **kwargs):
                self.api_calls[operation] = self.api_calls.get(operation, 0) + 1
                yield page

    # -- prices -----------------------------------------------------------------
    def on_demand_prices(self, types: Iterable[str]) -> dict[str, float]:
        """This region's on-demand $/h per type, unknown types left out. The operator's price
        file wins (it may hold contract prices); then the Price List when configured (read
        once per TTL; a failure raises, and the price signals keep the last good answer);
        then the catalog's list price for this region. A price that would only be another
        region's stand-in is left out: the PriceBook falls back to it and says whose it is."""
        names = [name for name in types if ("aws", name) in self.catalog]
        listed = self.price_list.on_demand_prices(names) if self.price_list else {}
        out = {}
        for name in names:
            price = self.catalog.price("aws", self.region, name)
            if name in listed and not price.source.startswith("price file"):
                out[name] = listed[name]
            elif price.on_demand_usd is not None and price.fallback_region is None:
                out[name] = price.on_demand_usd
        return out

    def spot_price_history(self, types: Iterable[str],
                           zones: Iterable[str] | None = None) -> list[SpotPrice]:
        wanted = sorted(set(types))
        stale = self._spot.missing(wanted)
        if stale:
            fetched = self._fetch_spot(stale)
            for name in stale:
                self._spot.put(name, [p for p in fetched if p.instance_type == name])
        zone_set = set(zones) if zones is not None else None
        return [p for name in wanted for p in self._spot.get(name) or []
                if zone_set is None or p.zone in zone_set]

    def _fetch_spot(self, types: list[str]) -> list[SpotPrice]:
        s = self.settings
        out = []
        dropped = 0
        # The rows are read in this frame, outside the pages' own aws_errors: a row that
        # breaks the reading must still be a CloudError, which the price signals tolerate.
        with aws_errors(f"ec2 describe_spot_price_history in {self.region}", s.endpoint_url):
            for page in self._pages(
                    "describe_spot_price_history", InstanceTypes=types,
                    ProductDescriptions=list(s.product_descriptions),
                    StartTime=self.clock() - s.spot_lookback,
                    PaginationConfig={"PageSize": s.spot_page_size}):
                for row in page.get("SpotPriceHistory", []):
                    price = _spot_row(row)
                    if price is None:
                        dropped += 1
                    else:
                        out.append(price)
        if dropped:
            log.warning("aws %s: dropped %d spot price row(s) for %s: not a finite price above "
                        "0 with a type, zone and time", self.region, dropped, ", ".join(types))
        log.info("aws %s: read %d spot price rows for %d types", self.region, len(out), len(types))
        return out

    # -- offerings ----------------------------------------------------------------
    def zones(self) -> list[str]:
        return sorted(set(self._zone_ids().values()))

    def _zone_ids(self) -> dict[str, str]:
        """The region's available zones, zone id (use1-az1) -> name (us-east-1a): names are
        per account, ids are what Spot placement scores answer in."""
        cached = self._zones.get(self.region)
        if cached is not None:
            return cached
        with aws_errors(f"ec2 describe_availability_zones in {self.region}",
                        self.settings.endpoint_url):
            resp = self._client("ec2").describe_availability_zones()
            found = {str(z.get("ZoneId") or z["ZoneName"]): str(z["ZoneName"])
                     for z in resp.get("AvailabilityZones", [])
                     if z.get("State", "available") == "available"}
        self.api_calls["describe_availability_zones"] = (
            self.api_calls.get("describe_availability_zones", 0) + 1)
        self._zones.put(self.region, found)
        return found

    def spot_placement_scores(self, types: Iterable[str]) -> dict[str, int] | None:
        """Zone name -> AWS's Spot placement score (1-10) of a capacity-optimized spot request
        for ``types`` in that one zone, or None where none is asked: scores are off in the
        settings, or fewer than three types (AWS then always answers a low score). Zones
        AWS leaves out of its top ten are left out; an answer outside what AWS can say (a
        score not in 1-10, another region, an unknown zone) is dropped and logged."""
        wanted = tuple(sorted(set(types)))
        if not self.settings.spot_scores or not scorable(wanted):
            return None
        cached = self._scores.get(wanted)
        if cached is not None:
            return cached
        names = self._zone_ids()
        found: dict[str, int] = {}
        dropped = 0
        try:
            pages = list(self._pages("get_spot_placement_scores", **self.spot_score_request(wanted)))
        except CloudAuthError as exc:
            raise CloudAuthError(f"{exc}; Spot placement scores also need ec2:GetSpotPlacementScores "
                                 "in the service's IAM policy") from None
        for page in pages:
            for row in page.get("SpotPlacementScores", []):
                score, zone = row.get("Score"), names.get(str(row.get("AvailabilityZoneId")))
                if (row.get("Region") != self.region or zone is None or isinstance(score, bool)
                        or not isinstance(score, int) or not 1 <= score <= 10):
                    dropped += 1
                    continue
                found[zone] = max(score, found.get(zone, 0))
        if dropped:
            log.warning("aws %s: dropped %d Spot placement score row(s) for %s that no AWS answer "
                        "could hold", self.region, dropped, ", ".join(wanted))
        self._scores.put(wanted, found)
        return found

    def spot_score_request(self, types: Iterable[str]) -> dict[str, Any]:
        """GetSpotPlacementScores' parameters for ``types``: one zone at a time, in this
        region, always the same target capacity, so a set is always the same request
        configuration (AWS may limit how many new ones an account asks in 24 h)."""
        return {"InstanceTypes": sorted(set(types)), "TargetCapacity": self.settings.spot_score_capacity,
                "TargetCapacityUnitType": "units", "SingleAvailabilityZone": True,
                "RegionNames": [self.region]}

    def offerings(self, types: Iterable[str]) -> list[ZoneOffering]:
        """Per zone of the region: is the type offered there (AWS has no stock signal)."""
        wanted = sorted(set(types))
        stale = self._offered.missing(wanted)
        if stale:
            where: dict[str, set[str]] = {name: set() for name in stale}
            for page in self._pages(
                    "describe_instance_type_offerings", LocationType="availability-zone",
                    Filters=[{"Name": "instance-type", "Values": stale}]):
                for row in page.get("InstanceTypeOfferings", []):
                    where.setdefault(row["InstanceType"], set()).add(row["Location"])
            for name in stale:
                self._offered.put(name, frozenset(where[name]))
        zones = self.zones()
        out = []
        for name in wanted:
            offered = self._offered.get(name) or frozenset()
            for zone in sorted(set(zones) | offered):
                ok = zone in offered
                out.append(ZoneOffering(name, zone, ok, "offered" if ok else "not-offered"))
        return out

    # -- instance truth -----------------------------------------------------------
    def managed_instances(self, tags: Mapping[str, str] | None = None,
                          states: Iterable[InstanceState] | None = None) -> list[CloudInstance]:
        """Every instance with our tags in ``states`` (default: all but terminated)."""
        filters = [{"Name": f"tag:{k}", "Values": [v]} for k, v in (tags or MANAGED_TAGS).items()]
        wanted = sorted(str(s) for s in (states if states is not None else LIVE_STATES))
        filters.append({"Name": "instance-state-name", "Values": wanted})
        out = []
        odd: set[str] = set()
        what = f"ec2 describe_instances in {self.region}"
        with aws_errors(what, self.settings.endpoint_url):  # as in _fetch_spot
            for page in self._pages("describe_instances", Filters=filters,
                                    PaginationConfig={"PageSize": self.settings.instances_page_size}):
                if not isinstance(page.get("Reservations"), list):
                    # EC2 sends an empty reservationSet when nothing matches: an answer
                    # without one is no evidence that the instances are gone.
                    raise CloudDataError(f"{what}: the answer has no Reservations")
                for reservation in page["Reservations"]:
                    out += [_instance(raw, what, odd) for raw in reservation.get("Instances", [])]
        if odd:
            log.warning("aws %s: instance state(s) %s are not AWS's: those instances are read as "
                        "pending, not gone", self.region, ", ".join(sorted(odd)))
        # The filter is applied by the API; checking again keeps a lax endpoint honest.
        return sorted((i for i in out if i.state in wanted), key=lambda i: i.instance_id)

    # -- images ---------------------------------------------------------------------
    def images_tagged(self, key: str, value: str) -> list[MachineImage]:
        """The account's own available images tagged ``key=value`` (a baked pool's bootstrap
        hash), newest first by CreationDate (one without a readable date last). The answer
        is checked: an image whose id is not an AMI id, or whose tags or state do not match
        what was asked (a lax endpoint), is left out and logged."""
        filters = [{"Name": f"tag:{key}", "Values": [value]},
                   {"Name": "state", "Values": ["available"]}]
        out: list[MachineImage] = []
        for page in self._pages("describe_images", Owners=["self"], Filters=filters):
            rows = page.get("Images", [])
            for raw in rows if isinstance(rows, list) else []:
                image = _image(raw, key, value)
                if image is None:
                    log.warning("aws %s: an image in the answer for %s=%s is not used: %.120r",
                                self.region, key, value, raw)
                else:
                    out.append(image)
        return sorted(out, key=_newest_first)

    # -- permissions (gpu-autoscaler doctor) ----------------------------------------
    def allowed(self, operation: str, **params: Any) -> bool:
        """Whether these credentials may call the EC2 ``operation`` with ``params``, asked
        with ``DryRun`` (nothing is launched or terminated): AWS answers DryRunOperation
        when the call would have been authorized, UnauthorizedOperation when not. Any
        other answer (a bad AMI, no credentials, no endpoint) is raised as a CloudError."""
        call = getattr(self._client("ec2"), operation)
        with aws_errors(f"ec2 {operation} (DryRun) in {self.region}", self.settings.endpoint_url):
            try:
                call(DryRun=True, **params)
            except bex.ClientError as exc:
                code = str(exc.response.get("Error", {}).get("Code", ""))
                if code in ("DryRunOperation", "UnauthorizedOperation"):
                    return code == "DryRunOperation"
                raise
        raise CloudDataError(f"ec2 {operation} (DryRun) in {self.region}: the endpoint answered "
                             "success to a DryRun call, which AWS never does")

    def queue_attributes(self, names: Iterable[str]) -> dict[str, str]:
        """The interruption queue's attributes (GetQueueAttributes: nothing is received,
        so no notice is consumed); {} without a queue."""
        if not self.settings.queue_url:
            return {}
        with aws_errors(f"sqs GetQueueAttributes of {self.settings.queue_url}",
                        self.settings.endpoint_url):
            answer = self._client("sqs").get_queue_attributes(
                QueueUrl=self.settings.queue_url, AttributeNames=list(names))
        attributes = answer.get("Attributes", {})
        return {str(k): str(v) for k, v in attributes.items()} if isinstance(attributes, dict) else {}

    # -- interruptions ------------------------------------------------------------
    def account_id(self) -> str:
        """The fleet's account: from the config, else the credentials' own (STS, asked once;
        until it answers, the queue is not read, so no notice is lost or obeyed unchecked)."""
        if self._account is None:
            with aws_errors("sts GetCallerIdentity", self.settings.endpoint_url):
                account = self._client("sts").get_caller_identity().get("Account")
            if not isinstance(account, str) or not account.isdigit():
                raise CloudError(f"sts GetCallerIdentity: no account id in the answer ({account!r})")
            self._account = account
        return self._account

    def notice_trust(self) -> Trust:
        return Trust(self.account_id(), self.settings.notice_regions or frozenset({self.region}))

    def interruption_queue(self) -> SqsInterruptionQueue | None:
        if not self.settings.queue_url:
            return None
        return SqsInterruptionQueue(self._client("sqs"), self.settings.queue_url,
                                    self.notice_trust, self.clock,
                                    wait_seconds=self.settings.sqs_wait_seconds,
                                    dead_letter_url=self.settings.dead_letter_url)

    def interruptions(self) -> list[Interruption]:
        """Notices from the SQS queue, deleted once read (empty if no queue is configured)."""
        queue = self.interruption_queue()
        if queue is None:
            return []
        with aws_errors(f"sqs receive from {self.settings.queue_url}", self.settings.endpoint_url):
            return queue.drain()


def _image(raw: object, key: str, value: str) -> MachineImage | None:
    """The image of one DescribeImages row, or None if the row is not what was asked for."""
    if not isinstance(raw, dict):
        return None
    image_id, tags = raw.get("ImageId"), raw.get("Tags")
    if not isinstance(image_id, str) or not _IMAGE_ID.fullmatch(image_id):
        return None
    if raw.get("State") != "available" or not isinstance(tags, list) or not any(
            isinstance(t, dict) and t.get("Key") == key and t.get("Value") == value for t in tags):
        return None
    created = raw.get("CreationDate")
    try:
        at = datetime.fromisoformat(created) if isinstance(created, str) and len(created) < 40 else None
    except ValueError:
        at = None
    return MachineImage(image_id, at if at is None or at.tzinfo is not None else None)


def _newest_first(image: MachineImage) -> tuple[bool, float, str]:
    at = image.created_at
    return (at is None, -at.timestamp() if at is not None else 0.0, image.image_id)


def _spot_row(row: Any) -> SpotPrice | None:
    """The price of one DescribeSpotPriceHistory row, or None if the row cannot be one."""
    if not isinstance(row, dict):
        return None
    name, zone, at = row.get("InstanceType"), row.get("AvailabilityZone"), row.get("Timestamp")
    usd = _positive(row.get("SpotPrice"))
    if (usd is None or not isinstance(name, str) or not isinstance(zone, str)
            or not isinstance(at, datetime)):
        return None
    return SpotPrice(instance_type=name, zone=zone, usd_per_hour=usd, at=at)


def _positive(value: object) -> float | None:
    """A finite number above 0 (AWS writes prices as decimal strings), else None."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return None
    try:
        number = float(value)
    except (ValueError, OverflowError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def _aware(value: object) -> datetime | None:
    """A timezone-aware time (botocore parses timestamps into them), else None: a naive or
    non-time value cannot be compared with our clock."""
    return value if isinstance(value, datetime) and value.utcoffset() is not None else None


def _instance(raw: Any, what: str, odd: set[str]) -> CloudInstance:
    """One DescribeInstances row; a state name AWS never sends is added to ``odd``."""
    instance_id = raw.get("InstanceId") if isinstance(raw, dict) else None
    if not isinstance(instance_id, str) or not instance_id:
        # Which instance is left out cannot be told, so the listing as a whole is not
        # believed (a node missing from it could be taken for a gone one).
        raise CloudDataError(f"{what}: an instance in the answer has no InstanceId")
    tags = {t["Key"]: t["Value"] for t in raw.get("Tags", [])
            if isinstance(t.get("Key"), str) and isinstance(t.get("Value"), str)}
    state = raw.get("State", {}).get("Name", "pending")
    if not isinstance(state, str) or state not in _STATE_NAMES:
        # Not a reason to think the instance is gone: read as pending, the live state that
        # claims the least about it.
        odd.add(repr(state)[:40])
        state = InstanceState.PENDING
    return CloudInstance(
        instance_id=instance_id,
        node=tags.get("node"), team=tags.get("team"), pool=tags.get("pool"),
        instance_type=raw.get("InstanceType", ""),
        zone=raw.get("Placement", {}).get("AvailabilityZone"),
        market=Market.SPOT if raw.get("InstanceLifecycle") == "spot" else Market.ON_DEMAND,
        state=InstanceState(state),
        private_ip=raw.get("PrivateIpAddress"),
        launched_at=_aware(raw.get("LaunchTime")),
        tags=tags,
    )
