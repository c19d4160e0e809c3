"""The scrape interval against the pools' windows, read from Prometheus' answers (the doctor
test runs the check on a real Prometheus scraping every 1 s, then every 3 m)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from autoscaler.service.doctor.signals import dcgm_jobs, scrape_interval, short_windows
from tests.builders import make_policy


def target(job: Any, interval: Any) -> dict[str, Any]:
    return {"labels": {"job": job, "instance": "127.0.0.1:9400"}, "scrapeInterval": interval}


def test_the_longest_interval_of_the_dcgm_jobs_wins() -> None:
    targets = [target("dcgm", "15s"), target("dcgm", "30s"), target("node", "2m"),
               target("dcgm-b", "20s")]
    assert scrape_interval(targets, {"dcgm", "dcgm-b"}) == ("dcgm", timedelta(seconds=30))
    assert scrape_interval(targets, {"other"}) is None


@pytest.mark.parametrize("answer", [
    None, "15s", [None, 3, "x"], [target("dcgm", "soon")], [target("dcgm", "-5s")],
    [target("dcgm", "0s")], [target("dcgm", "9999h")], [target("dcgm", 1e308)],
    [target(["dcgm"], "15s")], [{"labels": "dcgm", "scrapeInterval": "15s"}],
    [target("dcgm", True)]])
def test_answers_that_are_not_an_interval_are_left_out(answer: Any) -> None:
    assert scrape_interval(answer, {"dcgm"}) is None


@pytest.mark.parametrize("answer", [None, {}, [{"metric": {"job": 3}}], [{"metric": "job"}],
                                    [{"value": [1, "2"]}]])
def test_a_count_by_job_answer_without_jobs_gives_none(answer: Any) -> None:
    assert dcgm_jobs(answer) == set()


def test_each_window_under_two_scrapes_is_named() -> None:
    pools = [{"name": "fast", "cloud": "aws", "region": "us-east-1", "max_nodes": 2,
              "instance_types": ["p3.2xlarge"], "scale_up": {"window": "40s"},
              "scale_down": {"idle_for": "2m"}},
             {"name": "slow", "cloud": "aws", "region": "us-east-1", "max_nodes": 2,
              "instance_types": ["p3.2xlarge"]}]
    policy = make_policy(team="vision", pools=pools)
    pairs = [(policy.team, p) for p in policy.pools]
    assert short_windows(pairs, timedelta(seconds=30)) == ["vision/fast scale_up.window 40s"]
    assert short_windows(pairs, timedelta(seconds=15)) == []
