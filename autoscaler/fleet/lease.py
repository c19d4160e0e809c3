"""The leader lease and the fence every write and side effect passes (docs/operators/ha.md).

Time is the DATABASE's: a lease's expiry is written and compared with the clock of the
one server every instance shares (``clock_timestamp()`` on PostgreSQL, ``strftime('now')``
on SQLite), never with the caller's, so a skewed instance can neither take a live lease
nor keep one that ran out.

The epoch grows every time the lease starts a new term (another holder, or the same
holder after it expired). A fenced write checks, inside its own transaction, that the
lease row still carries this instance's holder and epoch and has not expired; on
PostgreSQL it holds the row ``FOR SHARE`` until it commits, so a takeover (which locks it
``FOR UPDATE``) waits for writes in flight and every later write of the old holder fails.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from autoscaler.fleet.tables import LeaseRow


class Fenced(RuntimeError):
    """This instance may not write or act: it does not hold the lease with its epoch.

    Not a StoreError on purpose: handlers that skip one bad node must not swallow it."""


@dataclass(frozen=True)
class LeaseToken:
    """What a leader holds: the lease's name, its own identity and the epoch it won."""

    name: str
    holder: str
    epoch: int


def db_now(s: Session) -> datetime:
    """The database server's current time (aware UTC), read in the session's transaction."""
    if s.get_bind().dialect.name == "postgresql":
        # clock_timestamp(), not now(): now() is the transaction's start, which may be
        # long before the row lock this transaction waited for.
        value: datetime = s.execute(select(func.clock_timestamp())).scalar_one()
        return value.astimezone(UTC)
    text = s.execute(select(func.strftime("%Y-%m-%d %H:%M:%f", "now"))).scalar_one()
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def take(s: Session, name: str, holder: str, ttl: timedelta) -> int | None:
    """Take or renew the lease in ``s``; the epoch, or None while another holds it."""
    row = s.get(LeaseRow, name, with_for_update=True)
    now = db_now(s)  # after the lock: the time this transaction decides at
    if row is None:
        # No row to lock yet: two first-time callers may both insert; the primary key
        # lets exactly one win (the other's commit raises IntegrityError).
        s.add(LeaseRow(name=name, holder=holder, expires_at=now + ttl, epoch=1))
        s.flush()
        return 1
    live = row.expires_at > now
    if row.holder != holder and live:
        return None
    if row.holder != holder or not live:
        row.epoch += 1  # a new term: writes fenced with the old epoch are refused
        row.holder = holder
    row.expires_at = now + ttl
    return row.epoch


def release(s: Session, name: str, holder: str) -> None:
    row = s.get(LeaseRow, name, with_for_update=True)
    if row is not None and row.holder == holder:
        row.expires_at = db_now(s)


def check(s: Session, token: LeaseToken | None) -> None:
    """Raise :class:`Fenced` unless ``token`` is the live lease (locks the row FOR SHARE)."""
    if token is None:
        raise Fenced("refused: this instance does not hold the leader lease")
    row = s.execute(select(LeaseRow.holder, LeaseRow.epoch, LeaseRow.expires_at)
                    .where(LeaseRow.name == token.name).with_for_update(read=True)).one_or_none()
    mine = f"{token.holder} (epoch {token.epoch})"
    if row is None:
        raise Fenced(f"refused: lease {token.name!r} does not exist; {mine} holds nothing")
    if (row.holder, row.epoch) != (token.holder, token.epoch):
        raise Fenced(f"refused: lease {token.name!r} is held by {row.holder} (epoch "
                     f"{row.epoch}); {mine} was deposed")
    now = db_now(s)
    if row.expires_at <= now:
        raise Fenced(f"refused: lease {token.name!r} of {mine} expired at "
                     f"{row.expires_at:%H:%M:%S.%f} (database time {now:%H:%M:%S.%f})")
