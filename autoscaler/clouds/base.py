"""What every cloud adapter returns: one Protocol, typed records, typed errors.

Both clouds expose the same function names (SkyPilot's ``sky/provision`` idea) so the
price signals, the reconciler and the CLI never branch on the cloud. The adapters are
read-only: Terraform is the only thing that creates or destroys instances.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import islice
from typing import Generic, Protocol, TypeVar

from autoscaler.model.clock import Clock, utc_now
from autoscaler.policy.models import Market

# Every instance Terraform creates for us carries this tag; the reconciler lists by it.
MANAGED_TAG_KEY = "managed-by"
MANAGED_TAG_VALUE = "gpu-autoscaler"
MANAGED_TAGS: Mapping[str, str] = {MANAGED_TAG_KEY: MANAGED_TAG_VALUE}


class CloudError(Exception):
    """A cloud API could not answer. Messages never contain secrets."""


class CloudAuthError(CloudError):
    """Credentials are missing or were rejected."""


class CloudUnreachableError(CloudError):
    """The endpoint did not answer (DNS, refused, timeout)."""


class CloudApiError(CloudError):
    """The API answered with an error code."""

    def __init__(self, code: str, message: str):
        super().__init__(f"{code}: {message}")
        self.code = code


class CloudDataError(CloudError):
    """The API answered, but with something we cannot use (shape, currency)."""


class InstanceState(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    SHUTTING_DOWN = "shutting-down"
    TERMINATED = "terminated"


# States in which an instance exists and may be billed: what the reconciler compares.
LIVE_STATES = frozenset(InstanceState) - {InstanceState.TERMINATED}


class InterruptionKind(StrEnum):
    INTERRUPTION = "interruption"  # the instance will be reclaimed at ``deadline``
    REBALANCE = "rebalance"  # elevated risk of interruption; no deadline yet


@dataclass(frozen=True)
class SpotPrice:
    instance_type: str
    zone: str
    usd_per_hour: float
    at: datetime


@dataclass(frozen=True)
class ZoneOffering:
    """Whether a type can be launched in a zone now (``stock`` is the cloud's own word)."""

    instance_type: str
    zone: str
    available: bool
    stock: str


@dataclass(frozen=True)
class CloudInstance:
    """Instance truth for the reconciler, read from the cloud and its tags."""

    instance_id: str
    node: str | None
    team: str | None
    pool: str | None
    instance_type: str
    zone: str | None
    market: Market
    state: InstanceState
    private_ip: str | None
    launched_at: datetime | None
    tags: Mapping[str, str] = field(default_factory=dict, compare=False)
    recycling: bool = False  # Alibaba: OperationLocks says the instance is being reclaimed


@dataclass(frozen=True)
class MachineImage:
    """One of the account's own images, as the cloud lists it (baked images)."""

    image_id: str
    created_at: datetime | None  # None: the cloud gave no readable creation time


@dataclass(frozen=True)
class Interruption:
    instance_id: str
    kind: InterruptionKind
    at: datetime
    deadline: datetime | None
    source: str = ""
    # Where the notice says the instance is; the intake acts only on a node the store has
    # there. A polled source stamps its own (cloud, region).
    cloud: str = ""
    region: str = ""


class CloudMarket(Protocol):
    """The read-only functions both cloud adapters implement."""

    cloud: str
    region: str

    def spot_price_history(self, types: Iterable[str],
                           zones: Iterable[str] | None = None) -> list[SpotPrice]: ...

    def on_demand_prices(self, types: Iterable[str]) -> dict[str, float]: ...

    def offerings(self, types: Iterable[str]) -> list[ZoneOffering]: ...

    def managed_instances(self, tags: Mapping[str, str] | None = None,
                          states: Iterable[InstanceState] | None = None) -> list[CloudInstance]: ...

    def interruptions(self) -> list[Interruption]: ...


def latest_spot(prices: Iterable[SpotPrice]) -> dict[tuple[str, str], SpotPrice]:
    """The newest price per (type, zone): history rows come back in no useful order."""
    out: dict[tuple[str, str], SpotPrice] = {}
    for p in prices:
        key = (p.instance_type, p.zone)
        if key not in out or p.at > out[key].at:
            out[key] = p
    return out


K = TypeVar("K")
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Values kept for ``ttl`` by the injected clock: prices change slowly, ticks are fast."""

    def __init__(self, ttl: timedelta, clock: Clock = utc_now):
        self.ttl, self.clock = ttl, clock
        self._items: dict[K, tuple[datetime, V]] = {}
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            item = self._items.get(key)
        if item is None or not self._fresh(item[0], self.clock()):
            return None
        return item[1]

    def _fresh(self, at: datetime, now: datetime) -> bool:
        # A negative age (our clock stepped back) is no proof of freshness either.
        return timedelta(0) <= now - at < self.ttl

    def put(self, key: K, value: V) -> None:
        with self._lock:
            now = self.clock()
            self._items.pop(key, None)  # to the end: the oldest put is always first
            self._items[key] = (now, value)
            # Keys churn (an image hash per bootstrap change): up to two stale items go per
            # put, from the oldest end, so the cache holds about what is fresh.
            for oldest in list(islice(self._items, 2)):
                if self._fresh(self._items[oldest][0], now):
                    break
                del self._items[oldest]

    def missing(self, keys: Iterable[K]) -> list[K]:
        return [k for k in keys if self.get(k) is None]
