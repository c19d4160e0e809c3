"""A built service with its HTTP API and two team tokens (vision, nlp)."""

from __future__ import annotations

import pytest

from autoscaler.fleet.store import FleetStore
from autoscaler.service.config.models import ServiceConfig
from autoscaler.service.wiring import Overrides, build_service
from tests.service.service_fakes import Clock, FakeExecutor, FakePrices, FakeSignals, write_policy

OPERATOR = "operator-token-0123456789"
VISION = "vision-token-0123456789"
NLP = "nlp-token-0123456789abc"
BODY = {"name": "ci-4711", "class": "atomic",
        "node_sets": [{"gpu_model": "V100", "gpus": 4, "nodes": 2}]}



@pytest.fixture
def service(tmp_path, monkeypatch):
    for name, value in (("GAS_OP", OPERATOR), ("GAS_VISION", VISION)):
        monkeypatch.setenv(name, value)
    (tmp_path / "nlp.token").write_text(NLP + "\n")
    write_policy(tmp_path / "policies", "vision", name="train", max_nodes=4)
    write_policy(tmp_path / "policies", "nlp", name="train", max_nodes=4)
    config = ServiceConfig.model_validate({
        "policies_dir": tmp_path / "policies", "tick": {"interval": "2s"},
        "store": {"url": f"sqlite:///{tmp_path / 'fleet.db'}"},
        "http": {"listen": "127.0.0.1:0", "token_env": "GAS_OP", "team_tokens": {
            "vision": {"env": "GAS_VISION"}, "nlp": {"file": tmp_path / "nlp.token"}}},
        "ansible": {"secret_env": {"cluster_join_munge_key_b64": "GAS_MUNGE"}},
    })
    clock, store = Clock(), FleetStore(config.store.url)
    svc = build_service(config, clock=clock, overrides=Overrides(
        signals=FakeSignals(), prices=FakePrices(), store=store,
        executor=FakeExecutor(store, clock)))
    svc.tick()  # the first tick loads the policies
    svc.start_api()
    yield svc
    svc.close()
    store.close()
