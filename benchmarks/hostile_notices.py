"""Hostile spot-notice queue messages against the real notice loop on moto's SQS (issue 30,
classes 2 and 3).

A moto server on 127.0.0.1, a fleet store with READY spot nodes (the executor rig of
tests/), and the service's own pieces: ``AwsCloud.interruption_queue()`` (parser, origin
check, refusal), ``InterruptionIntake`` and ``NoticeLoop`` with the executor's
``drain_now``. Each case puts its hostile message in the queue with a genuine notice for a
fresh node right behind it, then runs notice passes. Handled means: the genuine node became
INTERRUPTED within the passes the bound allows (1 for one message ahead; for the flood of
1,000, ceil(1001 / 10) = 101, since every pass makes at least one receive of 10 and deletes
what it refused), the victim node that forged notices name is untouched, the queue is empty
(the hostile message deleted, not redelivered) and the pass never failed. A traceback is
any log record with exception info.

    PYTHONPATH=$PWD python3 benchmarks/hostile_notices.py [--generated 40] [--flood 1000]

Last line: ``cases=<n> handled=<m> tracebacks=<t>``.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import boto3
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from moto.server import ThreadedMotoServer

from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.model.lifecycle import NodeState
from autoscaler.policy.models import Market
from autoscaler.service.control.interruptions import InterruptionIntake, NoticeLoop
from autoscaler.service.observe.metrics import ServiceMetrics
from benchmarks.hostile_outcome import Outcome
from tests.clouds.helpers import AWS_TEST_ENV, spot_warning
from tests.service.executor_rig import Rig, make_rig, slurm_policy

SURFACE = "notices"
FLOOD = 1000


def _with(instance: str, **changes: Any) -> str:
    return json.dumps({**json.loads(spot_warning(instance)), **changes})


def _detail(instance: str, **detail: Any) -> str:
    return _with(instance, detail={"instance-id": instance, **detail})


def fixed_cases(victim: str) -> list[tuple[str, list[str]]]:
    """(case, bodies put ahead of the genuine notice); ``victim`` is one of our instances."""
    sns = json.dumps({"Type": "Notification", "Message": spot_warning(victim)})
    return [
        ("deep-nesting-100kb", ["[" * 100_000]),
        ("deep-nesting-10kb", ["[" * 10_000]),
        ("deep-objects", ['{"a":' * 3_000]),
        ("time-year-9999", [_with(victim, time="9999-12-31T23:59:59Z")]),
        ("time-year-0001", [_with(victim, time="0001-01-01T00:00:00Z")]),
        ("time-future", [_with(victim, time="2030-01-01T00:00:00Z")]),
        ("time-not-a-time", [_with(victim, time="yesterday")]),
        ("time-number", [_with(victim, time=1e308)]),
        ("not-json", ["{not json"]),
        ("control-characters", ["\x1b[2J\x1b[31mred\r\n\t"]),
        ("json-array", ["[1, 2, 3]"]),
        ("huge-string", [json.dumps({"detail-type": "x" * 200_000})]),
        ("account-as-number", [_with(victim, account=123456789012)]),
        ("instance-id-injection", [_detail("i-1; rm -rf /")]),
        ("instance-action-huge", [_detail(victim, **{"instance-action": "x" * 10_000})]),
        ("sns-double-envelope", [json.dumps({"Type": "Notification", "Message": sns})]),
        ("sns-message-not-string", [json.dumps({"Type": "Notification", "Message": {"a": 1}})]),
        ("forged-source", [_with(victim, source="my.app")]),
        ("forged-account", [_with(victim, account="666666666666")]),
        ("forged-region", [_with(victim, region="mars-north-1")]),
        ("wrong-region", [_with(victim, region="us-west-2")]),
        ("unknown-instance", [spot_warning("i-0ffffffffffffffff")]),
        ("forged-state-change", [_with(victim, account="666666666666",
                                       **{"detail-type": "EC2 Instance State-change Notification"})]),
        ("ten-forged-in-one-receive", [_with(victim, account=f"66666666666{i}") for i in range(10)]),
    ]


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=12), inner, max_size=4), max_leaves=30)


def generated(count: int, victim: str) -> list[str]:
    """Event-shaped documents with any value in any field, and any text."""
    fields = st.fixed_dictionaries({}, optional={
        "source": st.just("aws.ec2") | JSON, "account": st.just("123456789012") | JSON,
        "region": st.just("us-east-1") | JSON,
        "detail-type": st.just("EC2 Spot Instance Interruption Warning") | JSON,
        "time": st.datetimes().map(lambda d: d.isoformat() + "Z") | JSON,
        "detail": st.fixed_dictionaries({}, optional={"instance-id": st.just(victim) | JSON,
                                                      "instance-action": JSON}) | JSON})
    bodies: list[str] = []

    @settings(max_examples=count, database=None, phases=[Phase.generate], deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(body=st.text(min_size=1, max_size=300) | fields.map(json.dumps))
    def collect(body: str) -> None:
        bodies.append(body)

    collect()
    return [b for b in bodies if b.strip()][:count]  # SQS refuses an empty body


class Tracebacks(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Traceback (most recent call last)" in record.getMessage():
            self.count += 1


@contextmanager
def moto_server() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one access line per request
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        url = f"http://{host}:{port}"
        with urllib.request.urlopen(urllib.request.Request(
                f"{url}/moto-api/reset", method="POST", data=b""), timeout=10):
            pass
        yield url
    finally:
        server.stop()


class Bench:
    def __init__(self, rig: Rig, endpoint: str):
        self.rig = rig
        self.sqs = boto3.client("sqs", region_name="us-east-1", endpoint_url=endpoint)
        self.url = self.sqs.create_queue(QueueName="interruptions")["QueueUrl"]
        cloud = AwsCloud("us-east-1", clock=rig.clock, settings=AwsSettings(
            endpoint_url=endpoint, queue_url=self.url,
            notice_regions=frozenset({"us-east-1", "us-west-2"})))
        source = cloud.interruption_queue()
        assert source is not None
        intake = InterruptionIntake(rig.store, [source], rig.settings, rig.clock,
                                    lambda: rig.policies)
        self.failures: list[str] = []
        self.passes: dict[str, int] = {}  # case -> notice passes it took (standalone output)
        self.loop = NoticeLoop(intake, rig.executor().drain_now, lambda: True,
                               lambda counts, texts: self.failures.extend(texts), ServiceMetrics())
        [self.victim] = rig.ready_nodes(market=Market.SPOT)

    def instance(self, name: str) -> str:
        return self.rig.node(name).instance_id or ""

    def touched(self, name: str) -> bool:
        return self.rig.state(name) is not NodeState.READY or \
            "INTERRUPTED" in [t.to_state for t in self.rig.store.transitions(name)]

    def queued(self) -> int:
        attrs = self.sqs.get_queue_attributes(QueueUrl=self.url, AttributeNames=[
            "ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"])["Attributes"]
        return sum(int(v) for v in attrs.values())

    def case(self, name: str, bodies: list[str], tracebacks: Tracebacks) -> Outcome:
        """The genuine notice must be applied within the bound: every pass reads at least
        one batch of 10 (and deletes what it refused), so ceil((len(bodies) + 1) / 10)."""
        bound = math.ceil((len(bodies) + 1) / 10)
        [genuine] = self.rig.ready_nodes(market=Market.SPOT)
        self.rig.slurm.scheduler.run(genuine, f"job-{name}")  # stays INTERRUPTED in its grace
        entries = [*bodies, spot_warning(self.instance(genuine))]
        for start in range(0, len(entries), 10):
            self.sqs.send_message_batch(QueueUrl=self.url, Entries=[
                {"Id": str(i), "MessageBody": b} for i, b in enumerate(entries[start:start + 10])])
        before, failed = tracebacks.count, len(self.failures)
        started = time.monotonic()
        applied = False
        for passes in range(1, bound + 1):
            self.passes[name] = passes
            self.loop.run_once()
            applied = "INTERRUPTED" in [t.to_state for t in self.rig.store.transitions(genuine)]
            if applied:
                break
        seconds = time.monotonic() - started
        handled = (applied and not self.touched(self.victim) and self.queued() == 0
                   and len(self.failures) == failed)
        return Outcome(SURFACE, name, handled, tracebacks.count > before, round(seconds, 3))


PASSES: dict[str, int] = {}  # of the last run, for the standalone output


def run(generated_count: int = 40, flood: int = FLOOD) -> list[Outcome]:
    tracebacks = Tracebacks()
    root = logging.getLogger()
    root.addHandler(tracebacks)
    saved = {k: os.environ.get(k) for k in AWS_TEST_ENV}
    os.environ.update(AWS_TEST_ENV)
    try:
        with tempfile.TemporaryDirectory() as tmp, moto_server() as endpoint:
            rig = make_rig(Path(tmp), policies={"vision": slurm_policy(max_nodes=1000, capacity={
                "on_demand_base": 0, "spot_percent": 100})})
            try:
                bench = Bench(rig, endpoint)
                victim = bench.instance(bench.victim)
                cases = fixed_cases(victim)
                cases += [(f"generated-{i}", [b]) for i, b in enumerate(generated(generated_count,
                                                                                   victim))]
                if flood:
                    cases.append((f"genuine-behind-{flood}-others", [
                        _with(f"i-{i:017x}", account="666666666666") if i % 2
                        else "[" * (i % 300 + 1) for i in range(flood)]))
                out = [bench.case(name, bodies, tracebacks) for name, bodies in cases]
                PASSES.update(bench.passes)
                return out
            finally:
                rig.store.close()
    finally:
        root.removeHandler(tracebacks)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", type=int, default=40, help="hypothesis-generated bodies")
    parser.add_argument("--flood", type=int, default=FLOOD, help="messages ahead of a genuine one")
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    outcomes = run(args.generated, args.flood)
    for o in outcomes:
        print(f"{o.surface} {o.case} handled={o.handled} traceback={o.traceback} "
              f"seconds={o.seconds:.3f} passes={PASSES.get(o.case, 0)}")
    print(f"cases={len(outcomes)} handled={sum(o.handled for o in outcomes)} "
          f"tracebacks={sum(o.traceback for o in outcomes)}")


if __name__ == "__main__":
    main()
