"""warm_pool: off by default, strict, and bounded by the pool (max_nodes, a forecast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.hostile_files import GOOD_POLICY
from tests.policy.loading import load_text


def test_off_by_default(tmp_path: Path) -> None:
    policy, errors = load_text(tmp_path, GOOD_POLICY)
    assert errors == []
    assert policy.pools[0].warm_pool is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(("extra", "size"), [
    ("    warm_pool: {size: 2, max: 3}\n", 2),
    ("    warm_pool: {size: 0, max: 1}\n", 0),
    ("    predictive: {mode: forecast-only}\n    warm_pool: {size: forecast, max: 4}\n", "forecast"),
    ("    predictive: {mode: scale}\n    warm_pool: {size: forecast, max: 4}\n", "forecast"),
])
def test_sizes_are_read(tmp_path: Path, extra: str, size: object) -> None:
    policy, errors = load_text(tmp_path, GOOD_POLICY + extra)
    assert errors == []
    assert policy.pools[0].warm_pool.size == size  # type: ignore[attr-defined]
    assert policy.pools[0].warm_pool.quantile == 0.99  # type: ignore[attr-defined]


def test_the_quantile_is_read(tmp_path: Path) -> None:
    policy, errors = load_text(tmp_path, GOOD_POLICY + "    predictive: {mode: scale}\n"
                               "    warm_pool: {size: forecast, max: 4, quantile: 0.95}\n")
    assert errors == []
    assert policy.pools[0].warm_pool.quantile == 0.95  # type: ignore[attr-defined]


@pytest.mark.parametrize(("extra", "path", "needle"), [
    ("{size: 4, max: 3}", "pools[0].warm_pool", "size (4) is above max (3)"),
    ("{size: 1, max: 0}", "pools[0].warm_pool.max", "greater than or equal to 1"),
    ("{size: -1, max: 2}", "pools[0].warm_pool.size", "or forecast"),
    ("{size: '2', max: 2}", "pools[0].warm_pool.size", "forecast"),
    ("{size: peak, max: 2}", "pools[0].warm_pool.size", "forecast"),
    ("{size: 1}", "pools[0].warm_pool.max", "required"),
    ("{size: 1, max: 2, state: hibernated}", "pools[0].warm_pool.state", "unknown key"),
    ("{size: 1, max: 5}", "pools[0].warm_pool.max", "above max_nodes (4)"),
    ("{size: forecast, max: 2}", "pools[0].warm_pool.size", "set predictive.mode"),
    ("{size: 1, max: 2, quantile: 1.0}", "pools[0].warm_pool.quantile", "less than or equal to 0.999"),
    ("{size: 1, max: 2, quantile: 0.2}", "pools[0].warm_pool.quantile", "greater than or equal to 0.5"),
    ("{size: 1, max: 2, quantile: .nan}", "pools[0].warm_pool.quantile", ""),
])
def test_bad_values_are_errors_with_their_path(tmp_path: Path, extra: str, path: str,
                                               needle: str) -> None:
    _, errors = load_text(tmp_path, GOOD_POLICY + f"    warm_pool: {extra}\n")
    assert [p for p, _ in errors] == [path], errors
    assert needle in errors[0][1], errors
