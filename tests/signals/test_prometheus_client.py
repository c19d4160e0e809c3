"""How the Prometheus reader talks HTTP: auth, headers, TLS settings, no retries, no secrets
in errors, an answer that trickles in given up on. A recording stub server stands in for
Prometheus (fast tests)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest

from autoscaler.signals.config import PrometheusConfig
from autoscaler.signals.prometheus import PrometheusReader, _session
from autoscaler.signals.rules import MARKER, RuleSet, avg_rule, newest_rule
from tests.builders import make_policy
from tests.hostile_answers import HOSTILE, AnswerServer
from tests.trickle import Trickle, trickling

POOL = make_policy("vision").pools[0]
NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Stub:
    def __init__(self) -> None:
        self.requests: list[dict[str, Any]] = []
        self.status = 200
        self.result: list[dict[str, Any]] = []
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                url = urlparse(self.path)
                stub.requests.append({"path": url.path, "query": parse_qs(url.query),
                                      "headers": dict(self.headers)})
                body = json.dumps({"status": "success" if stub.status == 200 else "error",
                                   "error": "boom",
                                   "data": {"resultType": "vector", "result": stub.result}})
                self.send_response(stub.status)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(body.encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def stub() -> Iterator[Stub]:
    s = Stub()
    thread = threading.Thread(target=s.httpd.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield s
    finally:
        s.httpd.shutdown()
        s.httpd.server_close()
        thread.join(timeout=5)


def read(cfg: PrometheusConfig) -> Any:
    reader = PrometheusReader(cfg)
    try:
        return reader.read({"vision-gpu-1": POOL}, [POOL], NOW)
    finally:
        reader.close()


def test_bearer_token_from_env_headers_time_and_timeout(stub: Stub,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROM_TOKEN", "s3cret-token")
    cfg = PrometheusConfig(url=stub.url, bearer_token={"token_env": "PROM_TOKEN"},
                           headers={"X-Scope-OrgID": "gpu"}, timeout="2s")
    result = read(cfg)
    # Two queries, and a third to date the newest sample of the node that had none.
    assert result.error is None and len(stub.requests) == 3
    assert 'Hostname=~"vision-gpu-1"' in stub.requests[2]["query"]["query"][0]
    first = stub.requests[0]
    assert first["path"] == "/api/v1/query"
    assert first["headers"]["Authorization"] == "Bearer s3cret-token"
    assert first["headers"]["X-Scope-OrgID"] == "gpu"
    assert first["query"]["time"] == [f"{NOW.timestamp():.3f}"]
    assert first["query"]["timeout"] == ["2s"]
    # No data at all is "missing", never zeros.
    assert result.nodes["vision-gpu-1"].metrics is None
    assert result.nodes["vision-gpu-1"].metrics_missing is not None


def test_bearer_token_from_file_and_basic_auth(stub: Stub, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    token = tmp_path / "token"
    token.write_text("file-token\n")
    read(PrometheusConfig(url=stub.url, bearer_token={"token_file": token}))
    assert stub.requests[-1]["headers"]["Authorization"] == "Bearer file-token"
    monkeypatch.setenv("PROM_PASSWORD", "pw")
    read(PrometheusConfig(url=stub.url, basic_auth={"username": "ops", "password_env": "PROM_PASSWORD"}))
    assert stub.requests[-1]["headers"]["Authorization"] == "Basic b3BzOnB3"  # ops:pw


def test_missing_secret_is_a_source_error_without_the_value(stub: Stub) -> None:
    result = read(PrometheusConfig(url=stub.url, bearer_token={"token_env": "NOT_SET_ANYWHERE"}))
    assert result.error == ("prometheus bearer token: environment variable NOT_SET_ANYWHERE is "
                            "not set")
    assert stub.requests == []


def test_http_error_is_not_retried(stub: Stub) -> None:
    stub.status = 503
    result = read(PrometheusConfig(url=stub.url))
    assert len(stub.requests) == 1 and result.queries == 1
    assert result.error is not None and result.error.startswith(
        "prometheus query failed: HTTP Status Code 503")


def test_unreachable_error_hides_credentials_in_url() -> None:
    result = read(PrometheusConfig(url="http://user:pw@127.0.0.1:9", timeout="1s"))
    assert result.error == "prometheus unreachable at http://127.0.0.1:9"


def test_tls_settings_reach_the_session(tmp_path: Path) -> None:
    ca = tmp_path / "ca.pem"
    session, _ = _session(PrometheusConfig(url="https://prom:9090", ca_file=ca))
    assert session.verify == str(ca)
    session, _ = _session(PrometheusConfig(url="https://prom:9090", verify=False))
    assert session.verify is False


def test_nan_values_are_absent_not_zero(stub: Stub) -> None:
    stub.result = [
        {"metric": {"Hostname": "vision-gpu-1", "gas_field": "mean:gpu_util:300"},
         "value": [NOW.timestamp(), "NaN"]},
        {"metric": {"Hostname": "vision-gpu-1", "gas_field": "newest_now:gpu_util"},
         "value": [NOW.timestamp(), "4"]},
    ]
    result = read(PrometheusConfig(url=stub.url))
    m = result.nodes["vision-gpu-1"].metrics
    assert m is not None and m.util_mean is None and m.sample_age_s == 4.0


@pytest.mark.parametrize("junk", [
    {"metric": {"Hostname": "vision-gpu-1", "gas_field": "mean:gpu_util:300"}, "value": [1, "x"]},
    {"metric": {"Hostname": "vision-gpu-1", "gas_field": "mean:gpu_util:300"}, "value": [1, 5]},
    {"metric": {"Hostname": "vision-gpu-1", "gas_field": "mean:gpu_util:300"}, "value": "50"},
    {"metric": {"Hostname": "vision-gpu-1", "gas_field": "mean:gpu_util:300"}},
    {"metric": ["vision-gpu-1"], "value": [1, "50"]},
    {"metric": {"Hostname": 7, "gas_field": "mean:gpu_util:300"}, "value": [1, "50"]},
    "not a series",
])
def test_a_junk_sample_is_absent_and_the_rest_is_read(stub: Stub, junk: Any,
                                                      caplog: pytest.LogCaptureFixture) -> None:
    """A proxy or a broken exporter answering junk costs that sample, never the source."""
    stub.result = [junk, {"metric": {"Hostname": "vision-gpu-1", "gas_field": "newest_now:gpu_util"},
                          "value": [NOW.timestamp(), "4"]}]
    result = read(PrometheusConfig(url=stub.url))
    m = result.nodes["vision-gpu-1"].metrics
    assert m is not None and m.util_mean is None and m.sample_age_s == 4.0
    assert "Traceback" not in caplog.text


@pytest.mark.exhausts_stack
@pytest.mark.parametrize(("answer", "error"), [("json-list", "TypeError"),
                                               ("json-deep", "RecursionError"),
                                               ("garbage-bytes", "JSONDecodeError")])
def test_an_answer_that_is_not_prometheus_is_a_source_error(answer: str, error: str) -> None:
    """The client indexes whatever JSON it gets: a list raised TypeError and 200k-deep
    JSON RecursionError, past the reader's error handling (a traceback per tick)."""
    server = AnswerServer(HOSTILE[answer]).start()
    try:
        result = read(PrometheusConfig(url=server.url))
    finally:
        server.stop()
    assert result.error == f"prometheus answered badly: {error}"


def recorded_answer(*series: Any) -> list[Any]:
    """The markers of POOL's rule groups (so the rules count as loaded), then ``series``."""
    cfg = PrometheusConfig(url="http://127.0.0.1:1")
    digests = RuleSet.of([POOL], cfg.node_label, cfg.stale_after).digests()
    return [*series, *({"metric": {"__name__": MARKER, "rule_group": g, "digest": d},
                        "value": [NOW.timestamp(), "1"]} for g, d in digests.items())]


MEAN = avg_rule("gpu_util", 300)


@pytest.mark.parametrize("junk", [
    {"metric": {"__name__": MEAN, "Hostname": "vision-gpu-2"}, "value": [1, "x"]},
    {"metric": {"__name__": MEAN, "Hostname": "vision-gpu-2"}, "value": [1, 5]},
    {"metric": {"__name__": MEAN, "Hostname": "vision-gpu-2"}, "value": "50"},
    {"metric": {"__name__": MEAN, "Hostname": "vision-gpu-2"}},
    {"metric": {"__name__": MEAN, "Hostname": "vision-gpu-2", "gpus": "many"}, "value": [1, "50"]},
    {"metric": {"__name__": MEAN, "Hostname": ["vision-gpu-2"]}, "value": [1, "50"]},
    {"metric": ["vision-gpu-2"], "value": [1, "50"]},
    {"metric": {"__name__": [MEAN], "Hostname": "vision-gpu-1"}, "value": [1, "50"]},
    {"metric": {"__name__": {"a": MEAN}, "Hostname": "vision-gpu-1"}, "value": [1, "50"]},
    {"metric": {"__name__": newest_rule("gpu_util", 900), "Hostname": "vision-gpu-2"},
     "value": [1, "+Inf"]},
    "not a series",
])
def test_junk_in_the_recorded_answer_is_absent_and_the_rest_is_read(
        stub: Stub, junk: Any, caplog: pytest.LogCaptureFixture) -> None:
    """In recording-rule mode too, junk costs its sample: it once raised out of the tick."""
    stub.result = recorded_answer(junk, {"metric": {"__name__": MEAN, "Hostname": "vision-gpu-1",
                                                    "gpus": "4"}, "value": [NOW.timestamp(), "35"]})
    reader = PrometheusReader(PrometheusConfig(url=stub.url, recording_rules=True))
    try:
        result = reader.read({"vision-gpu-1": POOL}, [POOL], NOW)
    finally:
        reader.close()
    assert result.error is None, result.error
    m = result.nodes["vision-gpu-1"].metrics
    assert m is not None and (m.util_mean, m.gpus_reporting) == (35.0, 4)
    assert "Traceback" not in caplog.text


@pytest.mark.parametrize("recording_rules", [False, True])
@pytest.mark.parametrize("result", [5, None, "vector", {"series": []}])
def test_a_result_that_is_not_a_list_is_a_source_error(stub: Stub, result: Any,
                                                       recording_rules: bool) -> None:
    """The client hands back ``data.result`` as it came: a number raised TypeError."""
    stub.result = result  # type: ignore[assignment]
    reader = PrometheusReader(PrometheusConfig(url=stub.url, recording_rules=recording_rules))
    try:
        reading = reader.read({"vision-gpu-1": POOL}, [POOL], NOW)
    finally:
        reader.close()
    assert reading.error == f"prometheus answered badly: a result of {type(result).__name__}"
    assert reading.nodes == {}


@pytest.fixture
def trickle() -> Iterator[Trickle]:
    with trickling(every=0.3) as t:
        yield t


@pytest.mark.timeout(30)
def test_an_answer_that_trickles_in_is_given_up_on_at_twice_the_timeout(trickle: Trickle) -> None:
    reader = PrometheusReader(PrometheusConfig(url=trickle.url, timeout="1s"))
    try:
        started = time.monotonic()
        first = reader.read({"vision-gpu-1": POOL}, [POOL], NOW)
        assert time.monotonic() - started < 4
        assert first.error == "prometheus did not finish its answer within 2s"
        # The overrunning query still holds its connection: no second one is sent meanwhile.
        second = reader.read({"vision-gpu-1": POOL}, [POOL], NOW)
        assert second.error is not None and "no query sent" in second.error
        assert trickle.requests == 1
    finally:
        trickle.stop.set()
        reader.close()
