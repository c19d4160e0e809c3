"""tests/fleet/test_store_history.py on PostgreSQL (a throwaway server on 127.0.0.1): the
nodes a launch created or a replacement for, matched on the JSON column, plan and audit pruning."""

from __future__ import annotations

import pytest

from autoscaler.fleet.store import FleetStore
from tests.fleet import test_store_history as history
from tests.service import postgres

pytestmark = pytest.mark.slow

pg = pytest.fixture(scope="module")(postgres.running)


@pytest.fixture
def store(pg: postgres.Postgres, request: pytest.FixtureRequest):
    s = FleetStore(pg.database(request.node.name[:60].lower()))
    yield s
    s.close()


test_a_launch_s_nodes_and_a_replacement_are_selected_in_sql = (
    history.test_a_launch_s_nodes_and_a_node_s_replacement_are_selected_in_sql)
test_old_plans_with_settled_actions_go_recent_and_open_ones_stay = (
    history.test_old_plans_with_settled_actions_go_recent_and_open_ones_stay)
test_the_newest_plans_stay_whatever_their_age_and_a_prune_is_bounded = (
    history.test_the_newest_plans_stay_whatever_their_age_and_a_prune_is_bounded)

test_audit_rows_older_than_the_cut_go_a_bounded_batch_at_a_time = (
    history.test_audit_rows_older_than_the_cut_go_a_bounded_batch_at_a_time)
