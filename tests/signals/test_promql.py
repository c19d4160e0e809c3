"""The raw-mode PromQL builder for any number of pools, zero included."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.sandbox.hosts.procs import free_port
from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.prometheus import PrometheusReader
from autoscaler.signals.promql import PoolWindows, QueryBuilder, balanced_or

STALE = timedelta(minutes=5)


def test_zero_pools_give_no_window_query_and_a_current_query() -> None:
    builder = QueryBuilder([], "Hostname", STALE)
    assert builder.windows_query() is None
    assert builder.followup_query({}) is None
    current = builder.current_query()
    assert current is not None and current.count("(") == current.count(")")
    assert 'gas_field", "gpus:gpu_util"' in current


def test_the_reader_sends_nothing_for_zero_pools() -> None:
    # Nothing listens on the port: a query sent would come back as an error.
    url = f"http://127.0.0.1:{free_port()}"
    for recorded in (False, True):
        reader = PrometheusReader(PrometheusConfig(url=url, recording_rules=recorded))
        try:
            reading = reader.read({}, [], datetime(2026, 11, 30, tzinfo=UTC))
        finally:
            reader.close()
        assert (reading.nodes, reading.error, reading.queries) == ({}, None, 0)


def test_balanced_or_of_nothing_is_an_error_not_a_recursion() -> None:
    with pytest.raises(ValueError, match="at least one expression"):
        balanced_or([])


@settings(max_examples=60, deadline=None)
@given(n=st.integers(1, 300))
def test_balanced_or_keeps_every_branch_once_and_nests_logarithmically(n: int) -> None:
    exprs = [f"e{i}" for i in range(n)]
    query = balanced_or(exprs)
    assert query.replace("(", "").replace(")", "").split(" or ") == exprs
    depth = deepest = 0
    for char in query:
        depth += {"(": 1, ")": -1}.get(char, 0)
        deepest = max(deepest, depth)
    assert depth == 0 and deepest <= max(1, n.bit_length())


WINDOWS = st.builds(PoolWindows, metric=st.sampled_from(["gpu_util", "gr_engine_active"]),
                    window_s=st.integers(1, 3600), idle_s=st.integers(1, 3600))


@settings(max_examples=60, deadline=None)
@given(windows=st.lists(WINDOWS, max_size=6))
def test_a_window_query_exists_exactly_when_some_pool_has_windows(windows: list[PoolWindows]) -> None:
    builder = QueryBuilder(windows, "Hostname", STALE)
    query = builder.windows_query()
    assert (query is None) == (not windows)
    for w in windows:
        assert query is not None and f"[{w.window_s}s]" in query and f"[{w.idle_s}s]" in query
