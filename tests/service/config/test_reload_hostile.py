"""Each hostile policy file of tests/hostile_files.py, written over one team's good file:
the reload never raises, that team keeps its last good policy with a file:line error, and
the other team is untouched."""

from __future__ import annotations

import os

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.service.config.reload import PolicyReloader
from tests.hostile_files import Case, policy_cases
from tests.service.service_fakes import write_policy


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("case", policy_cases(), ids=lambda c: c.name)
def test_a_hostile_file_keeps_only_its_team_on_the_last_good_policy(case: Case, tmp_path) -> None:  # type: ignore[no-untyped-def]
    d = tmp_path / "policies"
    write_policy(d, "vision", name="train", max_nodes=4)
    write_policy(d, "search", name="infer", max_nodes=2)
    reloader = PolicyReloader(d, default_catalog())
    before = reloader.refresh()
    assert before.errors == []
    good = reloader.policies
    path = d / "vision.yaml"
    path.write_bytes(case.data)
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    result = reloader.refresh()
    assert reloader.policies == good  # vision on its last good policy, search as it was
    assert result.errors and all(e.file == str(path) and e.line >= 1 for e in result.errors)
