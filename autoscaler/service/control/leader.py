"""Leader lease: with two instances on one PostgreSQL store, only the holder acts.

The lease lives in the store (:meth:`FleetStore.try_lease`, with a fencing epoch that
grows with every new term); its expiry is decided by the database's clock, so a skewed
wall clock here changes nothing. It is renewed by its own scheduler job every sixth of
its TTL, in its own thread, so a long tick (a Terraform apply) does not lose it. This
instance considers itself leader only until a safety margin before the lease would
expire, measured on the monotonic clock from the start of its last successful renewal:
a paused or partitioned process stops acting before another one may take over.

:meth:`Leadership.token` is the store's fence (``build_service`` sets it): every store
write, and :meth:`FleetStore.fence` before every side effect, check in the database that
the lease still has this instance's epoch, and raise ``Fenced`` otherwise.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from autoscaler.fleet.store import FleetStore, LeaseToken
from autoscaler.service.config.models import LeaderSettings

log = logging.getLogger(__name__)
SAFETY = 0.8  # act for at most this share of the TTL after the last renewal


def default_holder() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass(frozen=True)
class LeaderInfo:
    enabled: bool
    is_leader: bool
    holder: str
    epoch: int | None
    lease_holder: str | None = None
    lease_expires_at: datetime | None = None


class Leadership:
    """Who acts. With the lease disabled this instance always leads (single instance)."""

    def __init__(self, store: FleetStore, settings: LeaderSettings,
                 monotonic: Callable[[], float] = time.monotonic):
        self.store = store
        self.settings = settings
        self.monotonic = monotonic
        self.holder = settings.holder or default_holder()
        self.epoch: int | None = None
        self._valid_until = 0.0
        self._lock = threading.Lock()
        self._renewing = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def renew(self) -> bool:
        """Take or renew the lease; returns whether this instance leads now."""
        if not self.enabled:
            return True
        with self._renewing:  # the tick and the lease job may both renew: one at a time
            return self._renew()

    def _renew(self) -> bool:
        started = self.monotonic()
        ttl = self.settings.ttl
        try:
            epoch = self.store.try_lease(self.settings.name, self.holder, ttl)
        except Exception:  # the store is unreachable: keep leading only until the margin ends
            log.exception("leader lease: renewal failed")
            return self.is_leader()
        with self._lock:
            was = self.epoch is not None and started < self._valid_until
            if epoch is None:
                self.epoch, self._valid_until = None, 0.0
                if was:
                    log.warning("leader lease: lost to another instance; no longer acting")
                return False
            if not was or epoch != self.epoch:
                log.info("leader lease: %s is the leader (epoch %d)", self.holder, epoch)
            self.epoch = epoch
            self._valid_until = started + ttl.total_seconds() * SAFETY
        return True

    def is_leader(self) -> bool:
        if not self.enabled:
            return True
        with self._lock:
            return self.epoch is not None and self.monotonic() < self._valid_until

    def token(self) -> LeaseToken | None:
        """The lease this instance holds, or None when it may not act (the store's fence)."""
        with self._lock:
            if self.epoch is None or self.monotonic() >= self._valid_until:
                return None
            return LeaseToken(self.settings.name, self.holder, self.epoch)

    def release(self) -> None:
        """Hand the lease over at once on a clean shutdown (no TTL wait for the other)."""
        if not self.enabled or self.epoch is None:
            return
        try:
            self.store.release_lease(self.settings.name, self.holder)
        except Exception:
            log.exception("leader lease: release failed; it expires after its TTL")
        with self._lock:
            self.epoch, self._valid_until = None, 0.0
        log.info("leader lease released by %s", self.holder)

    def info(self) -> LeaderInfo:
        row = None
        if self.enabled:
            try:
                row = self.store.lease(self.settings.name)
            except Exception:
                log.exception("leader lease: cannot read the lease")
        return LeaderInfo(
            enabled=self.enabled, is_leader=self.is_leader(), holder=self.holder,
            epoch=self.epoch, lease_holder=row.holder if row else None,
            lease_expires_at=row.expires_at if row else None)
