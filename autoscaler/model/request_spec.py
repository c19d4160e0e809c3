"""A capacity request: what a CI/CD pipeline or batch system asks for, and its conditions.

The shape follows Kubernetes' ProvisioningRequest (node sets, a class, a booking, the
conditions Accepted / Provisioned / Failed / BookingExpired / Released). Every field comes
from an HTTP client we do not trust, so every string has a closed syntax and every number
a bound: the spec is data the engine reads, never text any tool interprets.

The models are strict (docs/teams/capacity-requests.md: no coercion): ``"gpus": "4"``, ``true``
and ``4.0`` are not 4, ``"dry_run": "yes"`` is not true, a duration is a string like ``2h``
(not a number of seconds) and a time a string with a zone (not a Unix timestamp). They read
the same from JSON text and from JSON-shaped dicts (the store's JSON column, tests).
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    StringConstraints,
    WithJsonSchema,
    model_validator,
)

from autoscaler.policy.duration import PATTERN, format_duration, parse_duration
from autoscaler.policy.models import InstanceTypeName, Name, Priority

DEFAULT_TTL = timedelta(hours=24)
DEFAULT_BOOKING = timedelta(minutes=10)  # as ProvisioningRequest's booking
MAX_TTL = timedelta(days=7)
MAX_NODES_PER_REQUEST = 64
MAX_NODE_SETS = 8
MAX_GPUS_PER_NODE = 16

# "req-4f2a9c01d3e7", as the store makes them (fleet/requests.py): an id given on a command
# line is checked against it before it goes into a URL.
REQUEST_ID = re.compile(r"req-[0-9a-f]{12}")
RequestId = Annotated[str, StringConstraints(pattern=f"^{REQUEST_ID.pattern}$")]

# "ci-4711": what a pipeline calls its request; also the idempotency key's syntax.
RequestName = Annotated[str, StringConstraints(pattern=r"^[a-z0-9][a-z0-9._-]{0,62}$")]
IdempotencyKey = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9._:-]{7,127}$")]
GpuModelName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,31}$")]
SlurmJobId = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,11}(_[0-9]{1,6})?$")]
# namespace/name of a pod or job; a label selector of key=value pairs joined by ','.
KubeObject = Annotated[str, StringConstraints(
    pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?/[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")]
KubeSelector = Annotated[str, StringConstraints(
    pattern=r"^[A-Za-z0-9][A-Za-z0-9_./-]{0,126}=[A-Za-z0-9_.-]{0,63}"
            r"(,[A-Za-z0-9][A-Za-z0-9_./-]{0,126}=[A-Za-z0-9_.-]{0,63}){0,7}$")]


def request_id(text: str) -> str:
    """``text`` if it is a request id (a parser for command-line arguments)."""
    if not REQUEST_ID.fullmatch(text):
        raise ValueError(f"{text[:40]!r} is not a request id (req- and 12 hex digits)")
    return text


def _duration_text(value: Any) -> timedelta:
    """A duration written as text (``90s``, ``2h``); no number of seconds, no echo of input."""
    if isinstance(value, timedelta):
        return value
    if not isinstance(value, str):
        raise ValueError("a duration is a string like '90s', '15m' or '48h'")
    try:
        return parse_duration(value)
    except ValueError:
        raise ValueError("a duration is a string like '90s', '15m' or '48h'") from None


def _time_text(value: Any) -> Any:
    """RFC 3339 text (or a datetime): a bare number is not read as a Unix timestamp."""
    if isinstance(value, str | datetime):
        return value
    raise ValueError("a time is a string like 2026-12-01T10:00:00Z")


TextDuration = Annotated[
    timedelta, BeforeValidator(_duration_text), PlainSerializer(format_duration, return_type=str),
    WithJsonSchema({"type": "string", "pattern": PATTERN, "examples": ["90s", "15m", "48h"]}),
]
# Lax only after _time_text let a string through: pydantic then parses RFC 3339 text.
TimeText = Annotated[datetime, BeforeValidator(_time_text), Field(strict=False)]
# Enums are read by value (JSON has no enum type); a value outside the set is refused.
LaxEnum = Field(strict=False)


class RequestClass(StrEnum):
    CHECK = "check"  # answer whether it could be met now and at what cost; buy nothing
    ATOMIC = "atomic"  # all nodes or none: a partial set is rolled back
    BEST_EFFORT = "best-effort"


class Condition(StrEnum):
    PENDING = "Pending"  # stored, the engine has not looked yet
    ACCEPTED = "Accepted"
    PROVISIONED = "Provisioned"
    FAILED = "Failed"
    BOOKING_EXPIRED = "BookingExpired"
    RELEASED = "Released"


FINAL = frozenset({Condition.FAILED, Condition.RELEASED})
# Which condition may follow which. A request that holds nodes (Provisioned, and
# BookingExpired while its nodes drain) ends Released, never Failed: its nodes go
# through the usual drain either way.
NEXT: dict[Condition, frozenset[Condition]] = {
    Condition.PENDING: frozenset({Condition.ACCEPTED, Condition.FAILED, Condition.RELEASED}),
    Condition.ACCEPTED: frozenset({Condition.PROVISIONED, Condition.FAILED, Condition.RELEASED}),
    Condition.PROVISIONED: frozenset({Condition.BOOKING_EXPIRED, Condition.RELEASED}),
    Condition.BOOKING_EXPIRED: frozenset({Condition.RELEASED}),
    Condition.FAILED: frozenset(),
    Condition.RELEASED: frozenset(),
}


class IllegalConditionError(ValueError):
    pass


def check_next(request_id: str, current: Condition, to: Condition) -> None:
    if to not in NEXT[current]:
        raise IllegalConditionError(f"request {request_id}: {current.value} cannot become "
                                    f"{to.value}")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


class NodeSet(_Strict):
    """``nodes`` nodes with ``gpus`` GPUs each, by GPU model or by instance type."""

    gpu_model: GpuModelName | None = None
    instance_type: InstanceTypeName | None = None
    gpus: int = Field(ge=1, le=MAX_GPUS_PER_NODE, description="GPUs per node.")
    nodes: int = Field(1, ge=1, le=MAX_NODES_PER_REQUEST)

    @model_validator(mode="after")
    def _one_kind(self) -> NodeSet:
        if (self.gpu_model is None) == (self.instance_type is None):
            raise ValueError("give exactly one of gpu_model or instance_type")
        return self


class Link(_Strict):
    """Release the request when this job (or these pods) end."""

    slurm_job: SlurmJobId | None = None
    kubernetes_pod: KubeObject | None = None
    kubernetes_job: KubeObject | None = None
    kubernetes_selector: KubeSelector | None = None

    @model_validator(mode="after")
    def _one(self) -> Link:
        given = [v for v in (self.slurm_job, self.kubernetes_pod, self.kubernetes_job,
                             self.kubernetes_selector) if v is not None]
        if len(given) != 1:
            raise ValueError("a link names exactly one of slurm_job, kubernetes_pod, "
                             "kubernetes_job or kubernetes_selector")
        return self

    def _given(self) -> tuple[str, str]:
        for kind in LINK_KINDS:
            value = getattr(self, kind)
            if value is not None:
                return kind, value
        raise ValueError("empty link")  # the validator forbids it

    def key(self) -> str:
        """``slurm_job=4711``: the linked object as one string (what "ended" sets hold)."""
        kind, value = self._given()
        return f"{kind}={value}"

    def describe(self) -> str:
        """``Slurm job 4711``, ``Kubernetes pods with labels app=ci``: for reasons."""
        kind, value = self._given()
        return LINK_KINDS[kind].format(value)


LINK_KINDS = {"slurm_job": "Slurm job {}", "kubernetes_pod": "Kubernetes pod {}",
              "kubernetes_job": "Kubernetes job {}",
              "kubernetes_selector": "Kubernetes pods with labels {}"}


class RequestSpec(_Strict):
    """The body of ``POST /v1/requests`` (the team comes from the token, never the body)."""

    name: RequestName
    pool: Name | None = Field(None, description="The team's pool; default: the first pool "
                              "whose instance types fit the node sets.")
    tier: Annotated[Priority, LaxEnum] | None = Field(
        None, description="Priority tier; default the team's.")
    node_sets: list[NodeSet] = Field(min_length=1, max_length=MAX_NODE_SETS)
    request_class: Annotated[RequestClass, LaxEnum] = Field(RequestClass.ATOMIC, alias="class")
    valid_until: TimeText | None = Field(None, description="How long it may wait to be met (RFC 3339 "
                                  "with a zone).")
    ttl: TextDuration = Field(DEFAULT_TTL, description="Released this long after Provisioned.")
    booking: TextDuration = Field(DEFAULT_BOOKING, description="Released (BookingExpired) when "
                                  "no job has used its nodes this long after Provisioned.")
    link: Link | None = None
    dry_run: bool = False
    idempotency_key: IdempotencyKey | None = None

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False,
                              populate_by_name=True)

    @model_validator(mode="after")
    def _bounds(self) -> RequestSpec:
        if not timedelta(minutes=1) <= self.ttl <= MAX_TTL:
            raise ValueError(f"ttl must be between 1 minute and {MAX_TTL.days} days")
        if not timedelta(minutes=1) <= self.booking <= self.ttl:
            raise ValueError("booking must be between 1 minute and the ttl")
        if self.valid_until is not None and self.valid_until.tzinfo is None:
            raise ValueError("valid_until needs a time zone (e.g. 2026-12-01T10:00:00Z)")
        if self.total_nodes > MAX_NODES_PER_REQUEST:
            raise ValueError(f"at most {MAX_NODES_PER_REQUEST} nodes per request")
        return self

    @property
    def total_nodes(self) -> int:
        return sum(s.nodes for s in self.node_sets)

    @property
    def total_gpus(self) -> int:
        return sum(s.nodes * s.gpus for s in self.node_sets)

    def shape(self) -> str:
        """``2 x 4 GPUs`` (or ``2 x 4 GPUs + 1 x 8 GPUs``), for reasons."""
        return " + ".join(f"{s.nodes} x {s.gpus} GPUs" for s in self.node_sets)


class RequestView(_Strict):
    """A stored request as the API and the engine see it."""

    id: str
    team: str
    spec: RequestSpec
    condition: Condition
    reason: str
    created_at: datetime
    updated_at: datetime
    provisioned_at: datetime | None = None
    nodes: dict[str, str | None] = Field(default_factory=dict, description="name -> address")
    claimed_at: datetime | None = Field(None, description="When a job was first seen on its nodes.")
    preview: dict[str, object] | None = None

    def label(self) -> str:
        """``request ci-4711 (team vision, atomic, 2 x 4 GPUs)``: how reasons name it."""
        return (f"request {self.spec.name} (team {self.team}, {self.spec.request_class.value}, "
                f"{self.spec.shape()})")

    @property
    def holds_nodes(self) -> bool:
        return self.condition in (Condition.PROVISIONED, Condition.BOOKING_EXPIRED)

