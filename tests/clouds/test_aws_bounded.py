"""A bounded botocore client: each call and each page within the limit, never the whole
listing (a fleet of many pages is still read)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

from autoscaler.bounded import Bound, Overran
from autoscaler.clouds.aws_bounded import BoundedClient


class SlowPages:
    """A stand-in for a botocore client: ``pages`` pages, each ``delay`` seconds away."""

    def __init__(self, pages: int, delay: float) -> None:
        self.pages, self.delay, self.calls = pages, delay, 0

    meta = SimpleNamespace(method_to_api_mapping={"describe_instances": "DescribeInstances"})

    def describe_instances(self, **kwargs: Any) -> dict[str, Any]:
        self.calls += 1
        time.sleep(self.delay)
        return {"Reservations": [], **kwargs}

    def get_paginator(self, operation: str) -> Any:
        outer = self

        class Paginator:
            def paginate(self, **kwargs: Any) -> Iterator[dict[str, Any]]:
                for n in range(outer.pages):
                    yield outer.describe_instances(Page=n, **kwargs)
        return Paginator()


@pytest.mark.timeout(20)
def test_each_page_is_bounded_not_the_whole_listing() -> None:
    raw = SlowPages(pages=5, delay=0.2)
    client = BoundedClient(raw, Bound(), "ec2", limit=0.6)
    started = time.monotonic()
    pages = list(client.pages("describe_instances", Filters=[]))
    assert [p["Page"] for p in pages] == [0, 1, 2, 3, 4]
    assert time.monotonic() - started > 0.6  # longer than one limit, and read all the same
    assert client.describe_instances(DryRun=True)["DryRun"] is True  # an operation, bounded
    assert client.meta.method_to_api_mapping == raw.meta.method_to_api_mapping  # the rest as is


@pytest.mark.timeout(20)
def test_a_page_that_overruns_stops_the_listing_and_the_next_call() -> None:
    raw = SlowPages(pages=3, delay=1.0)
    client = BoundedClient(raw, Bound(), "ec2", limit=0.3)
    with pytest.raises(Overran, match="ec2 describe_instances: did not finish"):
        list(client.pages("describe_instances"))
    with pytest.raises(Overran, match="nothing sent"):
        client.describe_instances()
    assert raw.calls == 1
