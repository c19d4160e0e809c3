"""What keeps dynamic Slurm nodes out, read from scontrol's answers (captured from
Debian 12's slurmctld 22.05: tests/service/doctor/test_doctor.py runs the check on a real
one)."""

from __future__ import annotations

from autoscaler.service.doctor.schedulers import dynamic_problems, slurm_settings

CONFIG = """Configuration data as of 2026-12-03T05:55:01
MaxNodeCount            = 5
SelectType              = select/cons_tres
SelectTypeParameters    = CR_CORE
TreeWidth               = 65533
"""
PARTITIONS = (
    "PartitionName=cpu AllowGroups=ALL Default=YES Nodes=s1 State=UP TotalNodes=1\n"
    "PartitionName=gpu AllowGroups=ALL Default=NO NodeSets=gpu_cloud Nodes=(null) State=UP "
    "TotalNodes=0\n")


def test_a_cluster_ready_for_dynamic_nodes_has_no_problem() -> None:
    assert dynamic_problems(slurm_settings(CONFIG), PARTITIONS, 1, {"gpu"}, 4) == ""


def test_each_missing_setting_is_named_with_what_to_add() -> None:
    config = CONFIG.replace("select/cons_tres", "select/linear").replace("= 5", "= 1")
    why = dynamic_problems(slurm_settings(config), PARTITIONS, 1, {"gpu", "cpu"}, 4)
    assert "SelectType is select/linear, dynamic nodes need select/cons_tres" in why
    assert "MaxNodeCount=1 leaves room for 0 more node(s) beside the 1 Slurm has, and the " \
        "Slurm pools may hold 4" in why
    assert "no Nodeset in partition(s) cpu (add Nodeset=cpu_cloud Feature=partition-cpu and " \
        "cpu_cloud to PartitionName=cpu Nodes=)" in why
    assert "partition(s) gpu" not in why


def test_too_little_room_for_the_pools_is_said() -> None:
    why = dynamic_problems(slurm_settings(CONFIG), PARTITIONS, 3, {"gpu"}, 4)
    assert why == ("MaxNodeCount=5 leaves room for 2 more node(s) beside the 3 Slurm has, "
                   "and the Slurm pools may hold 4")
    assert "MaxNodeCount=unset" in dynamic_problems(slurm_settings("SelectType = select/cons_tres\n"),
                                                    PARTITIONS, 0, {"gpu"}, 1)
