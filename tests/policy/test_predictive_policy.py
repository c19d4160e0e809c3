"""The ``predictive:`` section: strict types and bounds like the rest of a policy."""

from __future__ import annotations

from datetime import timedelta

import pytest
from pydantic import ValidationError

from autoscaler.policy.models import Predictive
from tests.builders import make_policy


def test_defaults_are_off_and_documented_values():
    p = make_policy().pools[0].predictive
    assert (p.mode, p.quantile, p.lead, p.min_history, p.max_extra_gpus) == (
        "off", 0.8, None, timedelta(days=7), 64)


def test_a_full_section_parses():
    pool = make_policy(predictive={"mode": "scale", "quantile": 0.9, "lead": "6m",
                                   "min_history": "14d", "max_extra_gpus": 16}).pools[0]
    assert pool.predictive.lead == timedelta(minutes=6)
    assert pool.predictive.mode == "scale"


@pytest.mark.parametrize("bad", [
    {"mode": "auto"}, {"quantile": 0.3}, {"quantile": 1.0}, {"quantile": "0.8"},
    {"max_extra_gpus": -1}, {"max_extra_gpus": 2.5}, {"lead": "soon"}, {"extra": 1},
])
def test_bad_values_are_refused(bad):
    with pytest.raises(ValidationError):
        make_policy(predictive=bad)


def test_the_model_is_frozen():
    with pytest.raises(ValidationError):
        Predictive().mode = "scale"  # type: ignore[misc]
