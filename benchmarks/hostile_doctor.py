"""Hostile answers and files against ``gpu-autoscaler doctor`` (surface doctor).

* answers: Prometheus, the Kubernetes API server and the AWS endpoint (STS, EC2, SQS) all
  pointed at one real server on 127.0.0.1 that answers each reply of
  tests/hostile_answers.py (HTML, bytes, 500 pages, wrong shape, NaN, 9 MiB and 200k-deep
  JSON, escape codes, a redirect, 401), then at a socket that accepts and never answers.
  Handled: every row of those checks is ``fail`` with its own reason (never the
  "unexpected" safety net, never ``ok`` on junk), within the checks' deadlines.
* files: config files that are not configs (bytes, non-UTF-8, a YAML alias bomb, 10k-deep
  nesting, NaN and 1e400 intervals, a policy directory that is a file) and
  hypothesis-generated texts. Handled: the ``config`` (or ``policies``) row fails, the rest
  is skipped, no exception.

    PYTHONPATH=$PWD python3 benchmarks/hostile_doctor.py
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import sys
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hypothesis import strategies as st  # noqa: E402
from hypothesis.errors import NonInteractiveExampleWarning  # noqa: E402

from autoscaler.service.doctor import Status, diagnose  # noqa: E402
from benchmarks.hostile_outcome import Outcome  # noqa: E402
from tests.hostile_answers import HOSTILE, AnswerServer, Reply  # noqa: E402

SURFACE = "doctor"
NETWORK_CHECKS = ("prometheus", "kubernetes", "aws credentials", "ec2", "sqs")
CASE_LIMIT_S = 30.0  # the slowest of these checks has a 20 s deadline
GENERATED = 12
POLICY = """\
apiVersion: gpu-autoscaler/v1
team: doc
priority: high
pools:
  - {name: train, cloud: aws, region: us-east-1, instance_types: [p3.2xlarge], max_nodes: 2,
     capacity: {on_demand_base: 0, spot_percent: 50}}
  - {name: serve, cloud: aws, region: us-east-1, instance_types: [g4dn.xlarge], max_nodes: 2,
     cluster: {kind: kubernetes}}
"""
BAD_FILES: dict[str, bytes] = {
    "bytes": bytes(range(256)),
    "not-utf8": b"policies_dir: \xff\xfe\n",
    "alias-bomb": b"a: &a [x, x, x, x, x, x, x, x, x]\n" + b"".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, "
        f"*{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}, *{chr(97 + i)}]\n".encode()
        for i in range(9)),
    "deep": b"policies_dir: p\nsignals: " + b"[" * 10_000 + b"]" * 10_000 + b"\n",
    "nan-interval": b"policies_dir: p\ntick: {interval: .nan}\n",
    "huge-interval": b"policies_dir: p\ntick: {interval: 1e400}\n",
    "list": b"- policies_dir\n- p\n",
    # Valid but for the policies: a store of its own (the default is ./gpu-autoscaler.db).
    "policies-is-a-file": b"policies_dir: service.yaml\nstore: {url: 'sqlite:///STORE'}\n",
}


def _config(root: Path, url: str, endpoint: str) -> Path:
    (root / "policies").mkdir(exist_ok=True)
    (root / "policies" / "doc.yaml").write_text(POLICY)
    path = root / "service.yaml"
    path.write_text(f"""\
policies_dir: policies
store: {{url: "sqlite:///{root / 'fleet.db'}"}}
signals:
  prometheus: {{url: "{url}", timeout: 3s}}
  scheduler: [kubernetes]
  kubernetes: {{host: "{url}", timeout: 3s}}
clouds:
  aws: {{endpoint_url: "{endpoint}", sqs_queue_urls: {{us-east-1: "{endpoint}/123456789012/q"}}}}
  market_prices: false
terraform: {{regions: {{aws/us-east-1: {{ami: ami-1e749f67}}}}}}
""")
    return path


def _answers(root: Path, name: str, url: str) -> Outcome:
    path = _config(root, url, url)
    started = time.monotonic()
    try:
        rows = diagnose(path, NETWORK_CHECKS)
    except Exception:  # reported as a traceback: diagnose must always return rows
        return Outcome(SURFACE, f"answer-{name}", False, True, time.monotonic() - started)
    seconds = time.monotonic() - started
    checked = [r for r in rows if r.name.startswith(NETWORK_CHECKS)]
    handled = (len(checked) >= len(NETWORK_CHECKS) and seconds < CASE_LIMIT_S
               and all(r.status is Status.FAIL and not r.reason.startswith("unexpected")
                       for r in checked))
    if not handled:
        print(f"  {name}: {[(r.name, r.status.value, r.reason[:160]) for r in checked]}")
    return Outcome(SURFACE, f"answer-{name}", handled, False, seconds)


def _file(root: Path, name: str, data: bytes) -> Outcome:
    case = root / name
    case.mkdir(exist_ok=True)
    path = case / "service.yaml"
    path.write_bytes(data.replace(b"STORE", str(case / "fleet.db").encode()))
    started = time.monotonic()
    try:
        rows = diagnose(path)
    except Exception:
        return Outcome(SURFACE, f"file-{name}", False, True, time.monotonic() - started)
    first = next((r for r in rows if r.status is Status.FAIL), None)
    handled = (first is not None and first.name in ("config", "policies")
               and not first.reason.startswith("unexpected"))
    return Outcome(SURFACE, f"file-{name}", handled, False, time.monotonic() - started)


@contextlib.contextmanager
def _silent_server() -> Iterator[str]:
    """Accepts connections (the kernel's backlog) and never answers a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def run() -> list[Outcome]:
    outcomes: list[Outcome] = []
    logging.disable(logging.WARNING)  # the rows carry the failures
    saved = {k: os.environ.get(k) for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    os.environ.update(AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing")
    try:
        with tempfile.TemporaryDirectory(prefix="hostile-doctor-") as tmp:
            root = Path(tmp)
            server = AnswerServer(Reply()).start()
            try:
                for name, reply in HOSTILE.items():
                    server.reply = reply
                    outcomes.append(_answers(root, name, server.url))
            finally:
                server.stop()
            with _silent_server() as url:
                outcomes.append(_answers(root, "silent", url))
            files = dict(BAD_FILES)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", NonInteractiveExampleWarning)
                for i in range(GENERATED):
                    files[f"generated-{i}"] = st.one_of(
                        st.binary(max_size=300),
                        st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
                    ).example()
            for name, data in files.items():
                outcomes.append(_file(root, name, data))
    finally:
        logging.disable(logging.NOTSET)
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return outcomes


if __name__ == "__main__":
    results = run()
    for o in results:
        print(f"{o.surface} {o.case}: handled={o.handled} traceback={o.traceback} {o.seconds:.2f}s")
    print(f"cases={len(results)} handled={sum(o.handled for o in results)} "
          f"tracebacks={sum(o.traceback for o in results)}")
