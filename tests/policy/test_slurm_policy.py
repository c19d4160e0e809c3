"""Policy checks of the Slurm cluster section: the accounts, QOS and users a pool serves."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.policy import json_schema, load_file
from autoscaler.policy.models import Cluster
from tests.hostile import SPLIT, TF_FILE, jinja
from tests.hostile_files import GOOD_POLICY

BASE = GOOD_POLICY + "    cluster: {cluster}\n"


def problems(tmp_path: Path, cluster: str) -> list[tuple[str, str]]:
    path = tmp_path / "vision.yaml"
    path.write_text(BASE.format(cluster=cluster))
    _, errors = load_file(path, default_catalog())
    return [(e.path, e.message) for e in errors]


def test_accounts_qos_and_users_are_read(tmp_path: Path) -> None:
    path = tmp_path / "vision.yaml"
    path.write_text(BASE.format(cluster="{kind: slurm, partition: gpu, accounts: [cv, cv-2.x], "
                                        "qos: [normal, High_1], users: [alice, bob@corp.example]}"))
    policy, errors = load_file(path, default_catalog())
    assert errors == [] and policy is not None
    cluster = policy.pools[0].cluster
    assert (cluster.accounts, cluster.qos, cluster.users) == (
        ["cv", "cv-2.x"], ["normal", "High_1"], ["alice", "bob@corp.example"])
    open_pool = Cluster(kind="slurm", partition="gpu")  # serves any account, qos and user
    assert (open_pool.accounts, open_pool.qos, open_pool.users) == ([], [], [])


@pytest.mark.parametrize(("cluster", "path"), [
    ("{kind: slurm, accounts: ['cv nlp']}", "pools[0].cluster.accounts[0]"),
    ("{kind: slurm, accounts: ['cv,nlp']}", "pools[0].cluster.accounts[0]"),
    (f"{{kind: slurm, accounts: ['{SPLIT}']}}", "pools[0].cluster.accounts[0]"),
    ("{kind: slurm, qos: ['$(reboot)']}", "pools[0].cluster.qos[0]"),
    (f"{{kind: slurm, qos: ['{TF_FILE}']}}", "pools[0].cluster.qos[0]"),
    (f"{{kind: slurm, users: [\"{jinja('slurm-user')}\"]}}", "pools[0].cluster.users[0]"),
    ("{kind: slurm, users: ['@corp']}", "pools[0].cluster.users[0]"),
    (f"{{kind: slurm, users: [{'a' * 65}]}}", "pools[0].cluster.users[0]"),
    ("{kind: slurm, accounts: cv}", "pools[0].cluster.accounts"),
    (f"{{kind: slurm, accounts: [{', '.join(f'a{i}' for i in range(257))}]}}", "pools[0].cluster.accounts"),
    ("{kind: kubernetes, accounts: [cv]}", "pools[0].cluster.accounts"),
    ("{kind: none, users: [alice]}", "pools[0].cluster.users"),
])
def test_refused(tmp_path: Path, cluster: str, path: str) -> None:
    assert {p for p, _ in problems(tmp_path, cluster)} == {path}


def test_the_schema_describes_them() -> None:
    cluster = json_schema()["$defs"]["Cluster"]["properties"]
    for name in ("accounts", "qos", "users"):
        assert cluster[name]["description"].startswith("Slurm: ")
        assert "pattern" in cluster[name]["items"] and cluster[name]["maxItems"] == 256
