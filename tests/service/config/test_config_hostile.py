"""Generated garbage as the service config file: nothing but ConfigError, every error at a
line (hypothesis)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from autoscaler.service.config.load import ConfigError, load_config
from tests.hostile_files import USER_DATA_SECRET, Case, config_cases

FAST = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])
GOOD = "policies_dir: policies\ntick: {interval: 30s}\nstore: {url: 'sqlite:///x.db'}\n"


def _load(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "config.yaml"
    path.write_bytes(data)
    try:
        load_config(path)
    except ConfigError as exc:
        assert exc.errors and all(e.file == str(path) and e.line >= 1 for e in exc.errors)


@FAST
@given(data=st.binary(max_size=3000))
def test_random_bytes(tmp_path: Path, data: bytes) -> None:
    _load(tmp_path, data)


@FAST
@given(cut=st.integers(0, len(GOOD)), noise=st.text(max_size=80))
def test_a_good_file_with_text_spliced_in(tmp_path: Path, cut: int, noise: str) -> None:
    _load(tmp_path, (GOOD[:cut] + noise + GOOD[cut:]).encode("utf-8", errors="surrogatepass"))


VALUES = st.recursive(st.none() | st.booleans() | st.integers(-10**30, 10**30) | st.floats()
                      | st.text(max_size=10),
                      lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=20)


@FAST
@given(section=st.sampled_from(["tick", "store", "http", "engine", "terraform", "ansible",
                                "signals", "leader", "executor"]), value=VALUES)
def test_any_value_in_any_section(tmp_path: Path, section: str, value: Any) -> None:
    text = json.dumps({"policies_dir": "policies", section: value})
    _load(tmp_path, text.replace("NaN", ".nan").replace("Infinity", ".inf").encode())


@pytest.mark.exhausts_stack
@pytest.mark.parametrize("case", config_cases(), ids=lambda c: c.name)
def test_every_hostile_config_is_refused_at_its_line(tmp_path: Path, case: Case) -> None:
    path = tmp_path / case.filename
    path.write_bytes(case.data)
    with pytest.raises(ConfigError) as refused:
        load_config(path)
    errors = refused.value.errors
    assert errors and all(e.file == str(path) for e in errors)
    if case.line is not None:
        assert errors[0].line == case.line, [str(e) for e in errors]
    assert not any(USER_DATA_SECRET in str(e) for e in errors)
