"""The crash-test world with the real Terraform actuator against moto, and a child process
that runs the same loop so a test can SIGKILL it (and its terraform) mid-apply.

``python -m tests.service.terraform_world CONFIG.json`` runs ticks until killed. With
``"operations": "workers"`` it is the service's actuation: applies and bootstraps run on
the real WorkerPools while the loop keeps ticking (one simulated second per real second,
so no lifecycle timeout fires while an apply runs); ``"slow_bootstrap"`` names a
directory where every bootstrap leaves a marker before it hangs (until killed).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from autoscaler.actuators.ansible import BootstrapRun
from autoscaler.actuators.drain import no_drainer
from autoscaler.actuators.terraform import TerraformSettings
from autoscaler.actuators.terraform.provisioner import TerraformProvisioner
from autoscaler.clouds.aws import AwsCloud, AwsSettings
from autoscaler.model.node import Node
from autoscaler.policy.models import TeamPolicy
from autoscaler.sandbox.hosts.procs import ManagedProcess
from autoscaler.service.executor import ExecutorSettings
from tests.builders import NOW, make_policy
from tests.fakes import FakeAnsible
from tests.service.crash_harness import Faults, Scenario, World

POOL = "v100"
REPO = Path(__file__).resolve().parents[2]


def policy(nodes: int) -> TeamPolicy:
    return make_policy(team="vision", name=POOL, min_nodes=nodes, max_nodes=nodes,
                       instance_types=["g4dn.xlarge"],
                       capacity={"on_demand_base": 0, "spot_percent": 0},
                       scale_down={"max_draining_percent": 100}, cluster={"kind": "none"})


class HangingAnsible(FakeAnsible):
    """A bootstrap that leaves ``<markers>/<node>`` and then runs until the process dies
    (a driver build the service is SIGKILLed in the middle of)."""

    def __init__(self, markers: Path):
        super().__init__()
        self.markers = markers

    def bootstrap(self, nodes: Sequence[Node], policies: Mapping[str, TeamPolicy], *,
                  secrets: Mapping[str, str] | None = None) -> BootstrapRun:
        for node in nodes:
            (self.markers / node.name).write_text("bootstrapping\n")
        time.sleep(3600)
        raise TimeoutError("bootstrap never finished")


def make_world(url: str, terraform: TerraformSettings, endpoint: str, nodes: int = 2) -> World:
    def cloud(name: str, region: str) -> AwsCloud:
        return AwsCloud(region, settings=AwsSettings(endpoint_url=endpoint))

    provisioner = TerraformProvisioner(terraform, cloud_for=cloud)  # type: ignore[arg-type]
    return World(url=url, policies={"vision": policy(nodes)}, provisioner=provisioner,
                 bootstrapper=FakeAnsible(), drainers={"none": no_drainer()},
                 address_of=lambda n: "169.254.77.2" if n.instance_id else None,
                 clouds=cloud,  # type: ignore[arg-type]
                 settings=ExecutorSettings(lost_after_misses=2))


def spawn_child(tmp_path: Path, name: str, url: str, terraform: TerraformSettings, endpoint: str,
                env: Mapping[str, str], **options: Any) -> ManagedProcess:
    """This module as a separate process on the store at ``url`` (its config in
    ``<name>.json``, its output in ``<name>.log``). ``options``: operations ("workers"),
    start_minutes, slow_bootstrap (a directory)."""
    config = tmp_path / f"{name}.json"
    config.write_text(json.dumps({"url": url, "terraform": terraform.model_dump(mode="json"),
                                  "endpoint": endpoint, "env": dict(env), **options}))
    return ManagedProcess(name, [sys.executable, "-m", "tests.service.terraform_world", str(config)],
                          tmp_path / f"{name}.log", env=dict(env), cwd=REPO)


def main(argv: Sequence[str]) -> None:
    config: dict[str, Any] = json.loads(Path(argv[0]).read_text())
    os.environ.update(config["env"])
    world = make_world(config["url"], TerraformSettings.model_validate(config["terraform"]),
                       config["endpoint"])
    workers = config.get("operations") == "workers"
    if workers:
        world.operations = "workers"
    if config.get("slow_bootstrap"):
        world.bootstrapper = HangingAnsible(Path(config["slow_bootstrap"]))
    scenario = Scenario(world, Faults(), later(config.get("start_minutes", 0)),
                        step_s=1.0 if workers else 30.0)
    for _ in range(100 if not workers else 3600):
        scenario.tick()
        running = ", ".join(op.what for op in scenario.executor.running())
        print(f"tick {scenario.ticks} at {scenario.now:%H:%M:%S}; running: {running or '-'}",
              flush=True)
        if workers:
            time.sleep(1.0)


def later(minutes: float) -> datetime:
    return NOW + timedelta(minutes=minutes)


if __name__ == "__main__":
    main(sys.argv[1:])
