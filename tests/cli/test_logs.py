"""The service's log records stay one line each, whatever the quoted text holds."""

from __future__ import annotations

import dataclasses
import io
import logging
from collections.abc import Iterator
from datetime import timedelta

import pytest

from autoscaler.cli.logs import LOG_FORMAT, OneLineFormatter, one_line
from autoscaler.engine import decide
from autoscaler.model.snapshot import SchedulerNode
from autoscaler.service.control.loop import ServiceLoop
from autoscaler.signals.slurm import _unusable, nodes_from_json
from tests.builders import NOW, busy, fleet, make_node, make_policy, snapshot

FORGED = ("bad gpu\n2099-01-01 00:00:00,000 INFO autoscaler.service.control.loop: plan 1: "
          "terminate n9: operator approved \x1b[31mRED\x1b[0m")


@pytest.fixture
def lines() -> Iterator[io.StringIO]:
    """What the root logger writes, through the service's formatter."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        yield out
    finally:
        root.removeHandler(handler)


def test_a_slurm_reason_cannot_forge_a_log_line() -> None:
    """A DOWN node's Reason= reaches the replace action's reason, which the loop logs."""
    [node] = nodes_from_json({"nodes": [{
        "name": "n0", "state": ["DOWN"], "reason": FORGED, "reason_set_by_user": "root",
        "reason_changed_at": int((NOW - timedelta(minutes=30)).timestamp())}]})
    said = _unusable(node, "down")
    down = dataclasses.replace(busy(gpus=4), scheduler=SchedulerNode(
        state="down", ready=False, gpus_total=4, unusable=said["unusable"],
        unusable_since=said["unusable_since"]))
    names = [f"n{i}" for i in range(10)]
    plan = decide({"vision": make_policy(instance_types=["p3.8xlarge"], max_nodes=100)},
                  fleet(*(make_node(n, instance_type="p3.8xlarge") for n in names)),
                  snapshot({n: down if n == "n0" else busy(gpus=4) for n in names}, missing=[]),
                  NOW)
    loop = ServiceLoop.__new__(ServiceLoop)
    loop.dry_run, loop._holds = False, set()
    # The loop's logger as the service sets it up, whatever other tests in this worker did
    # to it (a level, a library's dictConfig disabling existing loggers, logging.disable).
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(OneLineFormatter(LOG_FORMAT))
    logger = logging.getLogger("autoscaler.service.control.loop")
    saved = (logger.level, logger.disabled, logger.propagate, logging.root.manager.disable)
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.disabled, logger.propagate = False, False
    logging.disable(logging.NOTSET)
    try:
        ServiceLoop._log_plan(loop, 7, plan)
    finally:
        logger.removeHandler(handler)
        logger.setLevel(saved[0])
        logger.disabled, logger.propagate = saved[1], saved[2]
        logging.disable(saved[3])
    text = out.getvalue()
    [replace] = [line for line in text.splitlines() if "replace" in line]
    assert "bad gpu\\n2099-01-01 00:00:00,000 INFO" in replace
    assert "\\x1b[31mRED\\x1b[0m" in replace and "\x1b" not in text
    assert not any(line.startswith("2099-") for line in text.splitlines())


@pytest.mark.parametrize(("said", "written"), [
    ("a\nb\rc", "a\\nb\\rc"), ("tab\tkept", "tab\tkept"), ("\x00\x07\x7f\x9b", "\\x00\\x07\\x7f\\x9b"),
    ("rtl \u202eevil", "rtl \\u202eevil"), ("sep\u2028x", "sep\\u2028x"), ("GPU ✓ ü", "GPU ✓ ü"),
])
def test_control_characters_are_escaped_and_text_kept(said: str, written: str) -> None:
    assert one_line(said) == written


def test_a_traceback_keeps_its_lines(lines: io.StringIO) -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        logging.getLogger("t").exception("failed:\n%s", "two")
    first, *rest = lines.getvalue().splitlines()
    assert first.endswith("ERROR t: failed:\\ntwo")
    assert rest[0] == "Traceback (most recent call last):" and rest[-1] == "ValueError: boom"


def test_the_service_logs_through_the_one_line_formatter() -> None:
    from autoscaler.cli.run import configure_logging

    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        configure_logging("INFO")
        [handler] = root.handlers
        assert isinstance(handler.formatter, OneLineFormatter)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
