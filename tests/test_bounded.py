"""The whole-call limit (autoscaler/bounded.py): answers and errors come back, a call that
overruns is given up on at its limit, and no second call with its key starts until it ends."""

from __future__ import annotations

import threading
import time

import pytest

from autoscaler.bounded import Bound, Overran, sdk_call_limit


def test_an_answer_or_an_error_within_the_limit_comes_back_as_it_is() -> None:
    bound = Bound()
    assert bound.call("k", 5, lambda: 42) == 42
    with pytest.raises(KeyError, match="gone"):
        bound.call("k", 5, lambda: {}["gone"])


@pytest.mark.timeout(10)
def test_an_overrunning_call_is_given_up_on_and_its_key_refused_until_it_ends() -> None:
    bound, release, started = Bound(), threading.Event(), []
    def hangs() -> str:
        started.append(1)
        release.wait(10)
        return "late"
    begun = time.monotonic()
    with pytest.raises(Overran, match=r"did not finish its answer within 0\.3s") as first:
        bound.call("ec2", 0.3, hangs, "ec2 describe_instances")
    assert 0.3 <= time.monotonic() - begun < 1.5 and not first.value.still_running
    # While it runs, the same key fails at once and nothing is started; another key works.
    with pytest.raises(Overran, match="still runs: nothing sent") as second:
        bound.call("ec2", 0.3, hangs)
    assert second.value.still_running and started == [1] and bound.running("ec2")
    assert bound.call("sqs", 0.3, lambda: "ok") == "ok"
    release.set()  # the stuck call ends by itself: the key is usable again
    for _ in range(100):
        if not bound.running("ec2"):
            break
        time.sleep(0.05)
    assert bound.call("ec2", 0.3, lambda: "again") == "again"


def test_the_sdk_limit_covers_every_attempt_and_backoff() -> None:
    assert sdk_call_limit(3, 10, 1) == 3 + 2 * 10
    assert sdk_call_limit(3, 10, 2) == 52  # the defaults: a retry after at most 1 + 5 s
    assert sdk_call_limit(3, 10, 2, extra_s=1) == 2 * (3 + 1 + 2 * 10) + 6
    assert sdk_call_limit(1, 1, 8) == 8 * 3 + (1 + 2 + 4 + 8 + 16 + 20 + 20) + 7 * 5
    assert sdk_call_limit(3, 10, 0) == sdk_call_limit(3, 10, 1)  # at least one attempt
