"""The doctor's Prometheus rows never show a credential held in the URL."""

from __future__ import annotations

import json
from types import SimpleNamespace

from autoscaler.service.doctor.signals import prometheus
from autoscaler.signals.config import PrometheusConfig
from tests.hostile_answers import AnswerServer, Reply

TOKEN = "glsa_TestTokenValue1234567890abcd"


def test_a_token_in_the_url_is_not_printed_when_prometheus_answers() -> None:
    """The error path stripped ``user@`` already; the ok row printed the URL as written."""
    answer = {"status": "success", "data": {"resultType": "vector", "result": []}}
    server = AnswerServer(Reply(200, json.dumps(answer).encode())).start()
    try:
        host = server.url.split("://", 1)[1].rstrip("/")
        config = PrometheusConfig(url=f"http://{TOKEN}@{host}")
        ctx = SimpleNamespace(config=SimpleNamespace(signals=SimpleNamespace(prometheus=config)),
                              nodes=None, pools=lambda: [])
        rows = list(prometheus(ctx))  # type: ignore[arg-type]
    finally:
        server.stop()
    assert {r.status.value for r in rows} == {"ok"}, rows
    assert rows[0].reason.startswith(f"http://{host} answers; store unread")
    assert not any(TOKEN in r.reason for r in rows)
