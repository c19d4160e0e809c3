"""The GPU node's own daemons run as root only where they need it: the dcgm_exporter role's
unit, written by ansible-playbook on localhost (``--tags node``, nothing started, the unit
directory a temporary one), runs the exporter as a systemd-allocated user, sandboxed, reading
the GPUs through DCGM's host engine; ``systemd-analyze security --offline`` rates it no worse
than OK. The node_service helper refuses an "unprivileged" unit whose user is root.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.skipif(shutil.which("ansible-playbook") is None, reason="ansible-playbook not installed"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the roles write root-owned units"),
]

ROLES = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
# systemd-analyze security's exposure levels, best first; "no worse than OK".
ACCEPTED = ("PERFECT", "SAFE", "OK")
PLAYBOOK = """\
- hosts: all
  connection: local
  gather_facts: false
  roles:
    - role: dcgm_exporter
"""
ROOT_UNIT = """\
- hosts: all
  connection: local
  gather_facts: false
  tasks:
    - ansible.builtin.import_role: {name: node_service, tasks_from: unit}
      vars:
        node_service_name: rooted
        node_service_command: [/bin/true]
        node_service_unprivileged: true
"""


def run_playbook(tmp_path: Path, text: str, *args: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "play.yml").write_text(text)
    env = {**os.environ, "ANSIBLE_ROLES_PATH": str(ROLES), "ANSIBLE_NOCOLOR": "1",
           "ANSIBLE_RETRY_FILES_ENABLED": "False"}
    return subprocess.run(
        ["ansible-playbook", "-i", "gpu-a,", str(tmp_path / "play.yml"),
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", f"node_service_unit_dir={tmp_path}", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False)


@pytest.fixture(scope="module")
def exporter_unit(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("dcgm-unit")
    done = run_playbook(tmp, PLAYBOOK, "--tags", "node", "--skip-tags", "start,gpu-hardware")
    assert done.returncode == 0, done.stdout[-3000:]
    return tmp / "dcgm-exporter.service"


def settings(unit: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in unit.read_text().splitlines():
        if "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            out.setdefault(key, []).append(value)
    return out


def test_dcgm_exporter_runs_as_a_user_of_its_own_without_privileges(exporter_unit: Path) -> None:
    unit = settings(exporter_unit)
    assert unit["User"] == ["dcgm-exporter"] and unit["DynamicUser"] == ["yes"]
    for key, value in {"NoNewPrivileges": "yes", "CapabilityBoundingSet": "", "AmbientCapabilities": "",
                       "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
                       "RestrictSUIDSGID": "yes", "ProtectKernelModules": "yes"}.items():
        assert unit[key] == [value], key
    # The DCGM host engine (nvidia-dcgm, root) reads the GPUs: no embedded engine needing root.
    assert "--remote-hostengine-info localhost:5555" in unit["ExecStart"][0]
    assert unit["Environment"] == ['"NODE_NAME=gpu-a"']


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze not installed")
def test_systemd_rates_the_exporter_unit_no_worse_than_ok(exporter_unit: Path) -> None:
    report = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                             str(exporter_unit)], capture_output=True, text=True, timeout=60,
                            check=False).stdout
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", report)
    assert found, report[-2000:]
    assert found.group(2) in ACCEPTED, report


def test_an_unprivileged_unit_must_not_name_root(tmp_path: Path) -> None:
    done = run_playbook(tmp_path, ROOT_UNIT)
    assert done.returncode != 0
    assert "node_service_unprivileged needs a node_service_user other than root" in done.stdout
    assert not (tmp_path / "rooted.service").exists()
