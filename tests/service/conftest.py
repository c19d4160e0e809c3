"""The executor rig on a fresh SQLite store, for the executor, reconciler and intent tests."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.service.executor_rig import Rig, make_rig


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = make_rig(tmp_path)
    yield r
    r.store.close()
