"""playbooks/controller.yml over real SSH on a booted Debian 12 host: the controller as an operator
installs it.

One test host (the sandbox's node image booted with systemd in its own network namespace,
no network beyond 169.254.77.0/24). The wheel is built from this checkout as a release is
(``python -m build``: the sdist, then the wheel from it), offline; its
dependencies come from the wheelhouse scripts/install.sh downloaded, and the playbook runs
with ansible-playbook as an operator would: the wheel in /opt/gpu-autoscaler/venv, the
config, policies and a credential under /etc/gpu-autoscaler, a system user, the hardened
unit. The install has no extra's distributions (no matplotlib, nothing of the test
extra), prints the wheel's version and ``run --help``. Then, from outside the host: /healthz answers, a policy change is a reload (same PID,
the new team loaded), a killed service is restarted by systemd and resumes from its store,
and ``systemd-analyze security`` rates the unit no worse than OK.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import textwrap
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
import pytest

from autoscaler.actuators.ansible.runner import close_masters
from autoscaler.sandbox.hosts import wheelhouse
from autoscaler.sandbox.hosts.procs import ProcessError, wait_until
from autoscaler.sandbox.hosts.ssh_hosts import SshHosts

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn not installed"),
]

REPO = Path(__file__).resolve().parents[2]
HOST = "ctl"
PORT = 9464
TOKEN = "ctl-test-token-0123456789abcdef"  # the http token, a credential
ENV_SECRET = "ctl-test-env-secret-fedcba9876543210"  # a secret of the environment file
PLAYBOOK_TIMEOUT_S = 600.0
SERVICE = "gpu-autoscaler"
# Distributions only an extra brings (plots, dashboards, test): an install without extras
# must not have them.
EXTRAS_ONLY = ("matplotlib", "grafana-foundation-sdk", "pytest", "moto", "hypothesis")
SERVICE_MODULES = "autoscaler.service.app, autoscaler.service.wiring, autoscaler.cli.run"
# systemd-analyze security's exposure levels, best first; "no worse than OK".
ACCEPTED = ("PERFECT", "SAFE", "OK")

CONFIG = f"""\
policies_dir: /etc/gpu-autoscaler/policies
tick: {{interval: 2s}}
store: {{url: "sqlite:////var/lib/gpu-autoscaler/fleet.db"}}
terraform: {{workdir: /var/lib/gpu-autoscaler/terraform}}
ansible: {{runs_dir: /var/lib/gpu-autoscaler/ansible-runs}}
http:
  listen: 0.0.0.0:{PORT}
  token_file: /run/credentials/{SERVICE}.service/http-token
"""


def policy(team: str) -> str:
    return textwrap.dedent(f"""\
        apiVersion: gpu-autoscaler/v1
        team: {team}
        pools:
          - {{name: train, cloud: aws, region: us-east-1, instance_types: [g4dn.xlarge], max_nodes: 2}}
        """)


@dataclass
class Controller:
    hosts: SshHosts
    work: Path
    extra_vars: dict[str, Any]
    first_run: Run | None = None
    runs: int = 0

    @property
    def url(self) -> str:
        return f"http://{self.hosts.address_of(HOST)}:{PORT}"

    def playbook(self, **more: Any) -> Run:
        """Run the playbook with ansible-runner, as root over SSH; fails the test on a failure."""
        self.runs += 1
        private = self.work / f"run-{self.runs}"
        private.mkdir()
        envvars = {"ANSIBLE_ROLES_PATH": str(REPO / "playbooks" / "roles"),
                   "ANSIBLE_HOST_KEY_CHECKING": "False", "ANSIBLE_PIPELINING": "True",
                   "ANSIBLE_RETRY_FILES_ENABLED": "False", "ANSIBLE_NOCOLOR": "1",
                   # One connection per run (a new one per task costs ~2 s each); its
                   # master is ended with the run, so no ssh process outlives it.
                   "ANSIBLE_SSH_ARGS": "-o ControlMaster=auto -o ControlPersist=60s "
                                       "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR",
                   "ANSIBLE_SSH_CONTROL_PATH_DIR": str(private / "cp")}
        inventory = {"all": {"hosts": {self.hosts.address_of(HOST): {
            "ansible_port": self.hosts.port, "ansible_user": "root",
            "ansible_ssh_private_key_file": str(self.hosts.private_key)}}}}
        try:
            done = ansible_runner.run(
                private_data_dir=str(private),
                playbook=str(REPO / "playbooks" / "controller.yml"), inventory=inventory,
                extravars={**self.extra_vars, **more}, envvars=envvars, quiet=True,
                timeout=PLAYBOOK_TIMEOUT_S, cancel_callback=lambda: False)
        finally:
            close_masters(private / "cp")
        run = Run(list(done.events))
        assert done.status == "successful", (done.status, run.failures(), done.stdout.read()[-3000:])
        return run

    def sh(self, command: str, timeout: float = 30.0) -> str:
        return self.hosts.run(HOST, ["/bin/sh", "-c", command], timeout=timeout).stdout.strip()

    def main_pid(self) -> int:
        return int(self.sh(f"systemctl show -p MainPID --value {SERVICE}"))

    def get(self, path: str, token: str | None = None) -> tuple[int, str]:
        request = urllib.request.Request(self.url + path)
        if token:
            request.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(request, timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def healthy(self) -> bool:
        try:
            return self.get("/healthz")[0] == 200
        except OSError:
            return False

    def last_plan(self) -> int:
        code, body = self.get("/status", TOKEN)
        assert code == 200, body
        plan = json.loads(body)["last_plan"]
        return int(plan["id"]) if plan else 0

    def journal(self) -> str:
        return self.sh(f"journalctl -u {SERVICE} --no-pager -o cat")

    def wait(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """wait_until, failing with the unit's status and journal: what an operator reads."""
        try:
            wait_until(predicate, timeout, what)
        except ProcessError as exc:
            status = self.hosts.run(HOST, ["systemctl", "status", "--no-pager", SERVICE],
                                    check=False).stdout
            raise AssertionError(f"{exc}\n{status}\n{self.journal()[-4000:]}") from None


@dataclass
class Run:
    """One playbook run's events (ansible-runner's)."""

    events: list[dict[str, Any]]

    def _results(self, kind: str) -> list[dict[str, Any]]:
        return [e["event_data"] for e in self.events if e.get("event") == kind]

    def changed(self) -> set[str]:
        """Names of the tasks and handlers that changed something."""
        return {d["task"] for d in self._results("runner_on_ok") if d["res"].get("changed")}

    def result(self, task: str) -> dict[str, Any]:
        """The first result of ``task``."""
        return next(d["res"] for d in self._results("runner_on_ok") if d["task"] == task)

    def failures(self) -> list[str]:
        return [f"{d['task']}: {d['res'].get('msg', '')} {d['res'].get('stderr', '')}"[:800]
                for d in self._results("runner_on_failed")]


@pytest.fixture(scope="module")
def controller(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Controller]:
    work = tmp_path_factory.mktemp("controller")
    wheel = wheelhouse.build_wheel(work / "dist")
    deps = wheelhouse.archive(work / "wheels.tar")
    (work / "policies").mkdir()
    (work / "policies" / "ml.yaml").write_text(policy("ml"))
    (work / "policies" / "old.yaml").write_text(policy("old"))  # removed by a later run
    (work / "config.yaml").write_text(CONFIG)
    extra_vars = {
        "controller_become": False,  # connected as root; the image has no sudo
        "controller_wheel": str(wheel), "controller_wheelhouse_archive": str(deps),
        "controller_config_file": str(work / "config.yaml"),
        "controller_policies_dir": str(work / "policies"),
        "controller_credentials": {"http-token": TOKEN},
        # botocore would ask the instance metadata address for credentials.
        "controller_environment": {"AWS_EC2_METADATA_DISABLED": "true",
                                   "GPU_AUTOSCALER_TEST_SECRET": ENV_SECRET},
    }
    with SshHosts([HOST], work / "hosts") as hosts:
        ctl = Controller(hosts, work, extra_vars)
        ctl.first_run = ctl.playbook()
        yield ctl


def test_first_run_installs_a_service_that_answers_from_outside_as_its_own_user(
        controller: Controller) -> None:
    assert controller.first_run is not None
    first = controller.first_run.changed()
    # (no_log hides whether "Write the credentials" changed: its file is checked below)
    assert {"Install the wheel into the virtual environment", "Write the systemd unit",
            "Write the service config", "Enable and start the service"} <= first
    controller.wait(controller.healthy, 60, "/healthz 200 from outside the host")
    pid = controller.main_pid()
    assert controller.sh(f"ps -o user= -p {pid}") == "gpu-autoscaler"
    assert controller.sh("id -u gpu-autoscaler") != "0"
    # Nothing of it runs as root: no capability at all, none to gain; the installed code is
    # run as the service user by the playbook too (its version), never as root.
    assert controller.sh(f"grep -E '^Cap(Eff|Prm|Bnd|Amb):' /proc/{pid}/status").split()[1::2] == ["0" * 16] * 4
    assert controller.sh(f"grep NoNewPrivs /proc/{pid}/status").split() == ["NoNewPrivs:", "1"]
    assert controller.first_run.result("Read the installed version")["cmd"][:3] == ["runuser", "-u", "gpu-autoscaler"]
    # The release wheel (python -m build: sdist, then the wheel from it) in a new virtual
    # environment on a clean host, without extras: what a release must do (docs/internals/releasing.md).
    venv = "/opt/gpu-autoscaler/venv/bin"
    version = controller.sh(f"{venv}/gpu-autoscaler --version")
    assert version == f"gpu-autoscaler {Path(controller.extra_vars['controller_wheel']).name.split('-')[1]}"
    assert re.search(r"Usage: gpu-autoscaler run\b", controller.sh(f"{venv}/gpu-autoscaler run --help"))
    controller.sh(f"{venv}/python -c 'import {SERVICE_MODULES}'")
    listed = controller.sh(f"{venv}/pip list --disable-pip-version-check --format=freeze")
    names = {re.sub(r"[-_.]+", "-", line.split("==")[0]).lower() for line in listed.splitlines()}
    assert "gpu-autoscaler" in names and not names & set(EXTRAS_ONLY), sorted(names)
    # Secrets: root-only on disk, handed over by systemd, not in the environment file.
    assert controller.sh("stat -c '%U %a' /etc/gpu-autoscaler/credentials/http-token") == "root 400"
    assert controller.sh("stat -c '%U %a' /etc/gpu-autoscaler/environment") == "root 400"
    assert TOKEN not in controller.sh("cat /etc/gpu-autoscaler/environment /etc/gpu-autoscaler/config.yaml")
    assert "AWS_EC2_METADATA_DISABLED=true" in controller.sh(f"tr '\\0' '\\n' < /proc/{pid}/environ")
    # ... and neither the token nor an environment secret shows where others look: the
    # unit's properties (systemctl show), the command line (ps), the playbook's output.
    shown = controller.sh(f"systemctl show {SERVICE}; ps -o args= -p {pid}; cat /etc/systemd/system/{SERVICE}.service")
    assert TOKEN not in shown and ENV_SECRET not in shown
    assert ENV_SECRET not in json.dumps(controller.first_run.events)
    assert TOKEN not in json.dumps(controller.first_run.events)
    assert controller.sh("stat -c '%U %a' /etc/gpu-autoscaler/credentials /etc/gpu-autoscaler/config.yaml").split() \
        == ["root", "700", "root", "640"]
    # The token guards /status from outside; the store is the service's, in its state directory.
    assert controller.get("/status")[0] == 401
    controller.wait(lambda: controller.last_plan() >= 1, 30, "a plan recorded")
    assert controller.sh("stat -c '%U' /var/lib/gpu-autoscaler/fleet.db") == "gpu-autoscaler"
    assert TOKEN not in controller.journal() and ENV_SECRET not in controller.journal()


def test_a_policy_change_is_a_reload_and_nothing_else_changes(controller: Controller) -> None:
    controller.wait(controller.healthy, 60, "/healthz 200")
    pid = controller.main_pid()
    # One run (each costs ~70 s of CI): a policy added, and one removed from the directory,
    # which leaves the host too.
    (controller.work / "policies" / "vision.yaml").write_text(policy("vision"))
    (controller.work / "policies" / "old.yaml").unlink()
    result = controller.playbook(controller_store_upgrade=True)
    # Everything else was already as it should be: only the policies (and their handler).
    assert result.changed() == {"Write the policies", "Remove policies no longer in the policy "
                                "directory", "Reload gpu-autoscaler"}
    # `store current` ran with the service's environment (no_log: a secret is in it) and the
    # http token file (a credential of the running unit) unread; the check before any stop
    # says what it said: the store's file, at head.
    assert re.fullmatch(r"sqlite:////var/lib/gpu-autoscaler/fleet\.db \(file /var/lib/gpu-autoscaler/"
                        r"fleet\.db\): schema \S+ \(head\)",
                        result.result("Check the store's schema version")["msg"])
    assert ENV_SECRET not in json.dumps(result.events)
    controller.wait(lambda: "added ['vision']" in controller.journal()
                    and "removed ['old']" in controller.journal(), 30, "the teams reloaded")
    assert "reload requested" in controller.journal()
    assert controller.main_pid() == pid  # reloaded, not restarted
    assert controller.healthy()


def test_a_killed_service_is_restarted_and_resumes_from_its_store(controller: Controller) -> None:
    controller.wait(lambda: controller.healthy() and controller.last_plan() >= 1, 60, "a plan")
    before, pid = controller.last_plan(), controller.main_pid()
    controller.sh(f"kill -KILL {pid}")
    controller.wait(lambda: controller.main_pid() not in (0, pid), 60, "systemd to restart the service")
    controller.wait(controller.healthy, 60, "/healthz 200 after the restart")
    # The plan numbers go on from the store's: the restarted service read what it wrote.
    controller.wait(lambda: controller.last_plan() > before, 30, "a new plan after the restart")
    assert int(controller.sh(f"systemctl show -p NRestarts --value {SERVICE}")) >= 1


def test_systemd_rates_the_unit_no_worse_than_ok(controller: Controller) -> None:
    report = controller.sh(f"systemd-analyze security --no-pager {SERVICE}.service")
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", report)
    assert found, report[-2000:]
    assert found.group(2) in ACCEPTED, report
    unit = controller.sh(f"systemctl cat {SERVICE}")
    for setting in ("User=gpu-autoscaler", "ProtectSystem=strict", "NoNewPrivileges=yes",
                    "StateDirectory=gpu-autoscaler", "Restart=on-failure",
                    "LoadCredential=http-token:", "PrivateMounts=yes"):
        assert setting in unit, setting
    # No capability: the port is above 1024, so not even CAP_NET_BIND_SERVICE.
    shown = controller.sh(f"systemctl show -p CapabilityBoundingSet -p AmbientCapabilities {SERVICE}")
    assert sorted(shown.splitlines()) == ["AmbientCapabilities=", "CapabilityBoundingSet="], shown
