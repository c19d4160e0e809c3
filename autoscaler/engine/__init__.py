"""The pure decision engine: ``decide(policies, fleet, snapshot, now) -> Plan``."""

from autoscaler.engine.decide import decide
from autoscaler.engine.settings import EngineSettings
from autoscaler.model.plan import (
    Action,
    CancelDrain,
    Drain,
    Hold,
    Launch,
    Plan,
    Replace,
    ReportJob,
    StartWarm,
    Terminate,
)
from autoscaler.model.snapshot import DecisionInput, Snapshot

__all__ = [
    "Action",
    "CancelDrain",
    "DecisionInput",
    "Drain",
    "EngineSettings",
    "Hold",
    "Launch",
    "Plan",
    "Replace",
    "ReportJob",
    "Snapshot",
    "StartWarm",
    "Terminate",
    "decide",
]
