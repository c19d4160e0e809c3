"""tick.wake_after and tick.follow_up: demand and finished work between ticks move the next
tick, never run two at once."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

import pytest
from apscheduler.schedulers.background import BackgroundScheduler

from autoscaler.service.control.wake import LEAD, TickWaker, wake_time

T0 = datetime(2026, 12, 4, 12, 0, tzinfo=UTC)


def test_wake_time_is_wake_after_past_the_last_tick_or_now():
    after = timedelta(seconds=10)
    assert wake_time(T0, None, after) == T0 + LEAD
    assert wake_time(T0, T0 - timedelta(seconds=3), after) == T0 + timedelta(seconds=7)
    assert wake_time(T0, T0 - timedelta(seconds=30), after) == T0 + LEAD


class Rig:
    def __init__(self, after: timedelta | None, due: datetime | None,
                 follow_up: timedelta | None = None) -> None:
        self.now, self.due, self.moved = T0, due, []
        self.waker = TickWaker(after, self.reschedule, lambda: self.now, follow_up=follow_up)

    def reschedule(self, at: datetime) -> datetime | None:
        if self.due is None or self.due <= at:
            return None
        self.moved.append(at)
        due, self.due = self.due, at
        return due


def test_a_wake_moves_the_next_tick_and_a_later_regular_tick_is_left_alone(caplog):
    rig = Rig(timedelta(seconds=10), T0 + timedelta(seconds=30))
    rig.waker.started()
    rig.waker.ended()
    rig.now = T0 + timedelta(seconds=2)
    with caplog.at_level("INFO"):
        rig.waker.wake("GPU pod a/b unschedulable")
    assert rig.moved == [T0 + timedelta(seconds=10)] and rig.waker.wakes == 1
    assert "GPU pod a/b unschedulable: next tick at 12:00:10 instead of 12:00:30" in caplog.text
    rig.waker.wake("another pod")  # already sooner: nothing moves
    assert rig.moved == [T0 + timedelta(seconds=10)] and rig.waker.wakes == 1


def test_demand_during_a_tick_wakes_one_after_it_ends():
    rig = Rig(timedelta(seconds=10), T0 + timedelta(seconds=30))
    rig.waker.started()
    rig.waker.wake("pod 1")
    rig.waker.wake("pod 2")
    assert rig.moved == []
    rig.now = T0 + timedelta(seconds=12)
    rig.waker.ended()
    assert rig.moved == [T0 + timedelta(seconds=12) + LEAD]


def test_finished_work_follows_up_on_its_own_delay_even_with_wake_after_off(caplog):
    rig = Rig(None, T0 + timedelta(seconds=30), follow_up=timedelta(seconds=5))
    rig.waker.started()
    rig.waker.ended()
    rig.now = T0 + timedelta(seconds=2)
    rig.waker.wake("GPU pod a/b unschedulable")  # wake_after off: demand waits
    assert rig.moved == []
    with caplog.at_level("INFO"):
        rig.waker.follow_up("terraform apply vision/gpu finished")
    assert rig.moved == [T0 + timedelta(seconds=5)] and rig.waker.wakes == 1
    assert ("terraform apply vision/gpu finished: next tick at 12:00:05 instead of 12:00:30 "
            "(tick.follow_up 5s)") in caplog.text


def test_seen_during_a_tick_the_sooner_of_the_two_delays_wins():
    rig = Rig(timedelta(seconds=10), T0 + timedelta(seconds=30), follow_up=timedelta(seconds=3))
    rig.waker.started()
    rig.waker.wake("pod 1")
    rig.waker.follow_up("ansible w1 finished")
    rig.waker.wake("pod 2")
    rig.now = T0 + timedelta(seconds=1)
    rig.waker.ended()
    assert rig.moved == [T0 + timedelta(seconds=3)]


def test_off_and_a_failing_reschedule_wake_nothing(caplog):
    off = Rig(None, T0 + timedelta(seconds=30))
    off.waker.wake("pod")
    assert off.moved == []

    def broken(at: datetime) -> datetime | None:
        raise RuntimeError("scheduler shut down")

    waker = TickWaker(timedelta(seconds=10), broken, lambda: T0)
    waker.wake("pod")  # logged, not raised into the watch thread
    assert waker.wakes == 0 and "could not start the next tick sooner (pod)" in caplog.text


def test_the_services_scheduler_runs_a_woken_tick_once_and_keeps_its_interval():
    """The real APScheduler job, as Service.scheduler() adds it: an hour's interval."""
    from autoscaler.service.app import Service

    ran: list[float] = []
    done = threading.Event()
    sched = BackgroundScheduler(timezone=UTC)

    def tick() -> None:
        ran.append(time.monotonic())
        done.set()

    sched.add_job(tick, "interval", seconds=3600, id="tick", max_instances=1, coalesce=True,
                  next_run_time=datetime.now(UTC) + timedelta(seconds=3600))
    svc = Service.__new__(Service)  # only the scheduler hook: no loop, store or API
    svc._scheduler = sched
    sched.start()
    try:
        waker = TickWaker(timedelta(seconds=1), svc._tick_sooner, lambda: datetime.now(UTC))
        waker.wake("GPU pod a/b unschedulable")
        assert done.wait(10), "the woken tick did not run"
        assert len(ran) == 1 and waker.wakes == 1
        due = sched.get_job("tick").next_run_time
        assert due - datetime.now(UTC) > timedelta(seconds=3000)  # back on its interval
    finally:
        sched.shutdown(wait=True)


def test_demand_during_a_long_tick_runs_one_more_tick_after_it_and_none_is_skipped():
    """The tick took longer than wake_after: the woken one is due at once, while the
    scheduler still counts the ending tick as running (max_instances=1)."""
    from autoscaler.service.app import Service

    ran: list[float] = []
    second = threading.Event()
    sched = BackgroundScheduler(timezone=UTC)
    svc = Service.__new__(Service)
    svc._scheduler = sched
    waker = TickWaker(timedelta(seconds=1), svc._tick_sooner, lambda: datetime.now(UTC))

    def tick() -> None:
        waker.started()
        try:
            ran.append(time.monotonic())
            if len(ran) == 1:
                waker.wake("GPU pod a/b unschedulable")  # seen while this tick runs
                time.sleep(1.5)  # longer than wake_after
            else:
                second.set()
        finally:
            waker.ended()

    sched.add_job(tick, "interval", seconds=3600, id="tick", max_instances=1, coalesce=True,
                  next_run_time=datetime.now(UTC))
    sched.start()
    try:
        assert second.wait(10), "the tick woken during the first was skipped"
        assert len(ran) == 2 and waker.wakes == 1
    finally:
        sched.shutdown(wait=True)


def test_wake_after_below_a_second_is_refused():
    from autoscaler.service.config.models import TickSettings

    with pytest.raises(ValueError, match="wake_after must be at least 1s"):
        TickSettings(wake_after="500ms")
    assert TickSettings(wake_after=None).wake_after is None
    assert TickSettings().wake_after == timedelta(seconds=10)  # on unless turned off
    assert TickSettings(wake_after="30s").wake_after == timedelta(seconds=30)
    assert TickSettings().follow_up == timedelta(seconds=10)  # on unless turned off
    assert TickSettings(follow_up=None).follow_up is None
    with pytest.raises(ValueError, match="follow_up must be at least 1s"):
        TickSettings(follow_up="0s")


def test_a_created_capacity_request_wakes_the_tick_and_a_repeated_one_does_not(tmp_path):
    import json

    from tests.requests.conftest import BODY
    from tests.service.http.hostile import exchange, post_spec, running_service

    with running_service(tmp_path) as svc:
        woken: list[str] = []
        svc.waker.wake = woken.append  # type: ignore[method-assign]
        assert svc.api is not None
        body = json.dumps({**BODY, "idempotency_key": "ci-4711-1"}).encode()
        first = exchange(svc.api.address, post_spec(body))
        assert first.code == 201, first.body[:300]
        again = exchange(svc.api.address, post_spec(body))
        assert again.code == 200
        rid = json.loads(first.body)["id"]
        assert woken == [f"capacity request {rid} created"]
