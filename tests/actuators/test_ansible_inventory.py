"""Inventory of a bootstrap run: addresses from the resolver, pool settings as role variables."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from autoscaler.actuators.ansible import AnsibleActuator, AnsibleSettings, HostStatus
from autoscaler.actuators.ansible.inventory import InventoryError, build_inventory, pool_vars
from autoscaler.catalog.catalog import default_catalog
from autoscaler.model.lifecycle import NodeState
from autoscaler.model.node import Node
from autoscaler.policy.models import Market
from tests.builders import make_node, make_policy

SETTINGS = AnsibleSettings(ssh_user="root", ssh_port=2222, private_key_file=Path("/keys/id"))


def _policy():
    return make_policy(team="vision", pools=[
        {"name": "train", "cloud": "aws", "region": "us-east-1", "max_nodes": 4,
         "instance_types": ["p3.8xlarge"],
         "bootstrap": {"driver": "535", "cuda": "12.2", "sharing": "mps",
                       "mps": {"active_thread_percentage": 50,
                               "pinned_device_mem_limit_mib": 2048},
                       "timeout": "20m"},
         "health": {"max_gpu_temperature": 80},
         "cluster": {"kind": "slurm", "partition": "research"}},
        {"name": "infer", "cloud": "aws", "region": "us-east-1", "max_nodes": 4,
         "instance_types": ["g4dn.xlarge"],
         "bootstrap": {"sharing": "time-slicing", "time_slicing_replicas": 8,
                       "container_runtime": "docker"},
         "cluster": {"kind": "kubernetes", "labels": {"workload": "inference"}}},
    ])


def _node(name: str, pool: str = "train", itype: str = "p3.8xlarge", **kw: object) -> Node:
    return make_node(name, pool=pool, instance_type=itype, state=NodeState.BOOTSTRAPPING, **kw)


def test_pool_settings_become_the_roles_variables() -> None:
    policy = _policy()
    train = pool_vars("vision", policy.pool("train"))
    assert train["nvidia_driver_branch"] == "535"
    assert train["cuda_toolkit_version"] == "12.2"
    assert train["gpu_sharing_mode"] == "mps"
    # Whole percentages stay integers: CUDA reads "50", not "50.0".
    assert train["gpu_sharing_mps_active_thread_percentage"] == 50
    assert isinstance(train["gpu_sharing_mps_active_thread_percentage"], int)
    assert train["gpu_sharing_mps_pinned_device_mem_limit_mib"] == 2048
    assert train["gpu_sharing_mps_replicas"] == 4
    assert train["gpu_health_check_max_temperature"] == 80
    assert train["cluster_join_kind"] == "slurm"
    assert train["cluster_join_slurm_partition"] == "research"
    assert (train["cluster_join_team"], train["cluster_join_pool"]) == ("vision", "train")
    infer = pool_vars("vision", policy.pool("infer"))
    assert infer["gpu_sharing_time_slicing_replicas"] == 8
    assert infer["container_toolkit_runtime"] == "docker"
    assert infer["cluster_join_labels"] == {"workload": "inference"}


def test_every_variable_the_actuator_sets_is_a_documented_role_default() -> None:
    """A typo in a variable name would silently leave the role's default in place."""
    roles = Path(__file__).resolve().parents[2] / "playbooks" / "roles"
    documented = "".join(p.read_text() for p in roles.glob("*/defaults/main.yml"))
    inventory, _ = build_inventory([_node("n1")], {"vision": _policy()}, SETTINGS,
                                   lambda n: "10.0.0.1", default_catalog())
    host = inventory["all"]["hosts"]["n1"]
    role_vars = [k for k in host if not k.startswith(("ansible_", "gpu_node_"))]
    assert role_vars
    for name in role_vars:
        assert f"\n{name}:" in documented, f"{name} is not a default of any role"


def test_hosts_get_address_connection_and_instance_type_expectations() -> None:
    nodes = [_node("n1", market=Market.SPOT), _node("n2", pool="infer", itype="g4dn.xlarge")]
    addresses = {"n1": "169.254.77.2", "n2": "169.254.77.6"}
    inventory, skipped = build_inventory(nodes, {"vision": _policy()}, SETTINGS,
                                         lambda n: addresses[n.name], default_catalog())
    assert skipped == []
    n1 = inventory["all"]["hosts"]["n1"]
    assert (n1["ansible_host"], n1["ansible_port"], n1["ansible_user"]) == ("169.254.77.2", 2222,
                                                                            "root")
    assert n1["ansible_ssh_private_key_file"] == "/keys/id"
    assert (n1["gpu_health_check_expected_gpus"], n1["gpu_health_check_expected_model"]) == (4, "V100")
    assert n1["cluster_join_market"] == "spot"
    n2 = inventory["all"]["hosts"]["n2"]
    assert (n2["gpu_health_check_expected_gpus"], n2["gpu_health_check_expected_model"]) == (1, "T4")
    assert n2["cluster_join_kind"] == "kubernetes"
    # Root needs no sudo; any other user does.
    assert inventory["all"]["vars"]["gpu_node_become"] is False
    other = AnsibleSettings(ssh_user="ubuntu")
    inventory, _ = build_inventory(nodes, {"vision": _policy()}, other, lambda n: "10.0.0.9")
    assert inventory["all"]["vars"]["gpu_node_become"] is True


def test_nodes_without_an_address_are_left_out_with_a_reason() -> None:
    def resolver(node: Node) -> str | None:
        if node.name == "n2":
            return None
        if node.name == "n3":
            raise LookupError("terraform output has no private_ip for n3")
        return "10.0.0.1"

    nodes = [_node("n1"), _node("n2"), _node("n3")]
    inventory, skipped = build_inventory(nodes, {"vision": _policy()}, SETTINGS, resolver)
    assert list(inventory["all"]["hosts"]) == ["n1"]
    reasons = {s.node: s.reason for s in skipped}
    assert reasons["n2"] == "no address yet"
    assert "no private_ip for n3" in reasons["n3"]


def test_a_node_of_an_unknown_pool_is_an_error() -> None:
    with pytest.raises(InventoryError, match="vision/gone"):
        build_inventory([_node("n1", pool="gone")], {"vision": _policy()}, SETTINGS,
                        lambda n: "10.0.0.1")


def test_unresolvable_nodes_fail_as_unreachable_without_running_ansible(tmp_path: Path) -> None:
    settings = AnsibleSettings(runs_dir=tmp_path / "runs")
    actuator = AnsibleActuator(settings, lambda n: None)
    run = actuator.bootstrap([_node("n1")], {"vision": _policy()})
    assert run.hosts["n1"].status is HostStatus.UNREACHABLE
    assert run.hosts["n1"].message == "no address yet"
    assert (run.run_dir / "results.json").is_file()
    assert not (run.run_dir / "stdout").exists()  # nothing was run


def test_run_timeout_defaults_to_the_longest_pool_bootstrap_timeout() -> None:
    assert AnsibleSettings().run_timeout([timedelta(minutes=20), timedelta(minutes=45)]) == \
        timedelta(minutes=45)
    assert AnsibleSettings(timeout="5m").run_timeout([timedelta(minutes=45)]) == \
        timedelta(minutes=5)


def test_settings_reject_unknown_keys() -> None:
    with pytest.raises(ValueError, match="ssh_usr"):
        AnsibleSettings.model_validate({"ssh_usr": "root"})
