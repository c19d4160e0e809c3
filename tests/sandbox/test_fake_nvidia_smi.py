"""The sandbox's fake nvidia-smi in MIG mode, run here (its driver flag moved to tmp_path):
NVIDIA's table layouts, as the cluster_join role parses them on a booted host."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from autoscaler.sandbox.fakes import nvidia_smi
from autoscaler.sandbox.fakes.nvidia_smi import LOADED_FLAG, FakeGpu, FakeMigError, node_files, script

A100 = "NVIDIA A100-SXM4-40GB"
LAYOUTS = [("3g.20gb", "3g.20gb"), ("1g.5gb", "2g.10gb", "4g.20gb")]
# The cluster_join role's pattern for a row of `nvidia-smi mig -lci` (roles/cluster_join/vars).
LCI_ROW = re.compile(r"(?m)^[|]\s+([0-9]{1,2})\s+([0-9]{1,2})\s+MIG\s+([0-9a-z.+]{1,24})\s+[0-9]+"
                     r"\s+([0-9])\s+[0-9]+:[0-9]+\s+[|]\s*$")


@pytest.fixture
def smi(tmp_path: Path) -> Path:
    gpus = [FakeGpu(A100, memory_mib=40960, mig=layout) for layout in LAYOUTS]
    path = tmp_path / "nvidia-smi"
    (tmp_path / "loaded").touch()
    path.write_text(script(gpus).replace(LOADED_FLAG, str(tmp_path / "loaded")))
    path.chmod(0o755)
    return path


def run(smi: Path, *args: str) -> tuple[int, list[str]]:
    done = subprocess.run([str(smi), *args], capture_output=True, text=True, timeout=30, check=False)
    return done.returncode, done.stdout.splitlines()


def test_gpu_instances_are_listed_in_nvidias_table(smi: Path) -> None:
    rc, lines = run(smi, "mig", "-i", "0", "-lgi")
    assert rc == 0
    # The layout of NVIDIA's MIG user guide (`nvidia-smi mig -lgi` on an A100 40GB).
    assert lines == [
        "+-------------------------------------------------------+",
        "| GPU instances:                                        |",
        "| GPU   Name             Profile  Instance   Placement  |",
        "|                          ID       ID       Start:Size |",
        "|=======================================================|",
        "|   0  MIG 3g.20gb          9        1          0:4     |",
        "+-------------------------------------------------------+",
        "|   0  MIG 3g.20gb          9        2          4:4     |",
        "+-------------------------------------------------------+",
    ]
    assert run(smi, "mig", "-i", "1", "-lgi")[1][5:10:2] == [
        "|   1  MIG 1g.5gb          19        1          0:1     |",
        "|   1  MIG 2g.10gb         14        2          1:2     |",
        "|   1  MIG 4g.20gb          5        3          3:4     |"]


def test_compute_instances_parse_as_the_role_reads_them(smi: Path) -> None:
    rc, lines = run(smi, "mig", "-lci")
    assert rc == 0
    assert lines[6] == "|   0      1       MIG 3g.20gb          2         0          0:3     |"
    assert all(len(line) == 70 for line in lines)
    assert LCI_ROW.findall("\n".join(lines)) == [
        ("0", "1", "3g.20gb", "0"), ("0", "2", "3g.20gb", "0"),
        ("1", "1", "1g.5gb", "0"), ("1", "2", "2g.10gb", "0"), ("1", "3", "4g.20gb", "0")]


def test_mig_mode_and_devices_are_reported_like_the_real_tool(smi: Path) -> None:
    assert run(smi, "--query-gpu=index,mig.mode.current", "--format=csv,noheader")[1] == [
        "0, Enabled", "1, Enabled"]
    assert run(smi, "-L")[1][:3] == [
        f"GPU 0: {A100} (UUID: GPU-fake-0000)",
        "  MIG 3g.20gb     Device  0: (UUID: MIG-fake-0000-0)",
        "  MIG 3g.20gb     Device  1: (UUID: MIG-fake-0000-1)"]


def test_a_gpu_without_mig_has_no_instances(tmp_path: Path) -> None:
    path = tmp_path / "nvidia-smi"
    (tmp_path / "loaded").touch()
    path.write_text(script([FakeGpu()]).replace(LOADED_FLAG, str(tmp_path / "loaded")))
    path.chmod(0o755)
    assert run(path, "mig", "-lci") == (6, ["No MIG-enabled devices found."])
    assert run(path, "--query-gpu=mig.mode.current", "--format=csv,noheader")[1] == ["[N/A]"]


def test_the_driver_makes_the_caps_devices_and_its_minors_visible() -> None:
    files = {f.path: f for f in node_files([FakeGpu(A100, memory_mib=40960, mig=LAYOUTS[0])] * 2)}
    devices = files["/etc/tmpfiles.d/gpu-autoscaler-fake-nvidia.conf"].content
    # GPU g, GPU instance i: minor 3 + 135 g + 9 i, its compute instance 0 one more.
    for minor in (1, 2, 12, 13, 21, 22, 147, 148, 156, 157):
        assert f"L+ /dev/nvidia-caps/nvidia-cap{minor} - - - - /dev/null\n" in devices
    assert devices.count("L+ /dev/nvidia-caps/") == 10
    minors = files[f"{nvidia_smi.PROC_DRIVER_SOURCE}/nvidia-caps/mig-minors"].content
    assert "gpu1/gi2/access 156\ngpu1/gi2/ci0/access 157\n" in minors
    unit = files[f"/etc/systemd/system/{nvidia_smi.DRIVER_UNIT}"].content
    assert f"ExecStart=/bin/mount --bind {nvidia_smi.PROC_DRIVER_SOURCE} /proc/driver\n" in unit
    plain = {f.path: f for f in node_files([FakeGpu()])}
    assert "mount" not in plain[f"/etc/systemd/system/{nvidia_smi.DRIVER_UNIT}"].content


def test_an_unknown_profile_is_refused() -> None:
    with pytest.raises(FakeMigError, match=r"5g\.30gb"):
        script([FakeGpu(A100, memory_mib=40960, mig=("5g.30gb",))])
