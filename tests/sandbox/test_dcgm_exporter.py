"""The synthetic dcgm-exporter: real text format, scenarios, control endpoint, CLI."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.sandbox.fakes.dcgm_exporter import (
    COUNTERS,
    THERMAL_THROTTLE,
    ControlError,
    DcgmExporterServer,
    ExporterControl,
    SyntheticDcgm,
)
from autoscaler.sandbox.fakes.dcgm_scenarios import Constant, Ramp, Trace
from autoscaler.sandbox.hosts.procs import ManagedProcess, free_port, wait_until
from autoscaler.sandbox.services.prometheus import write_file_sd
from tests.shared_data import SHARED_DATA

GENAI = SHARED_DATA / "alibaba-genai-2026/pod_gpu_duty_cycle_anon.csv.gz"


class FakeClock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def samples(text: str, metric: str) -> dict[tuple[str, str], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == metric:
                out[(s.labels["Hostname"], s.labels["gpu"])] = s.value
    return out


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def test_text_format_matches_dcgm_exporter() -> None:
    dcgm = SyntheticDcgm(Constant(42))
    dcgm.add_node("vision-v100-train-1", gpus=2, model="V100")
    text = dcgm.render("vision-v100-train-1") or ""
    for name, kind, help_text in COUNTERS:
        assert f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n" in text
    line = next(ln for ln in text.splitlines() if ln.startswith("DCGM_FI_DEV_GPU_UTIL{"))
    assert re.fullmatch(
        r'DCGM_FI_DEV_GPU_UTIL\{gpu="0",UUID="GPU-[0-9a-f-]{36}",pci_bus_id="[0-9A-F:.]+",'
        r'device="nvidia0",modelName="Tesla V100-SXM2-16GB",Hostname="vision-v100-train-1",'
        r'DCGM_FI_DRIVER_VERSION="[0-9.]+"\} 42', line)
    # The official Python parser reads it, one series per GPU and field.
    assert samples(text, "DCGM_FI_DEV_GPU_UTIL") == {("vision-v100-train-1", "0"): 42,
                                                      ("vision-v100-train-1", "1"): 42}
    gr = samples(text, "DCGM_FI_PROF_GR_ENGINE_ACTIVE")
    assert gr[("vision-v100-train-1", "0")] == pytest.approx(0.42)


def test_scenarios_ramp_and_overrides() -> None:
    clock = FakeClock()
    dcgm = SyntheticDcgm(Ramp(0, 100, 100), clock=clock)
    dcgm.add_node("a", gpus=2)
    dcgm.add_node("b", gpus=1, model="T4")
    clock.t += 50
    assert samples(dcgm.render() or "", "DCGM_FI_DEV_GPU_UTIL")[("a", "1")] == 50
    clock.t += 500
    assert samples(dcgm.render() or "", "DCGM_FI_DEV_GPU_UTIL")[("b", "0")] == 100
    dcgm.set_util(7, node="a", gpu=1)
    dcgm.set_util(3)  # every node, whole-node pins replace per-GPU pins
    util = samples(dcgm.render() or "", "DCGM_FI_DEV_GPU_UTIL")
    assert util == {("a", "0"): 3, ("a", "1"): 3, ("b", "0"): 3}
    dcgm.set_util(None)
    assert samples(dcgm.render() or "", "DCGM_FI_DEV_GPU_UTIL")[("a", "0")] == 100
    with pytest.raises(ControlError):
        dcgm.set_util(101)
    with pytest.raises(ControlError):
        dcgm.set_util(5, node="nope")


def test_faults_xid_temperature_throttle_dropout() -> None:
    dcgm = SyntheticDcgm(Constant(10))
    dcgm.add_node("a", gpus=2)
    dcgm.add_node("b", gpus=2)
    dcgm.inject_xid("a", gpu=1, xid=79)
    dcgm.set_temperature(96, node="a")
    dcgm.set_throttle(THERMAL_THROTTLE, node="a")
    dcgm.set_dropout("b")
    text = dcgm.render() or ""
    assert samples(text, "DCGM_FI_DEV_XID_ERRORS") == {("a", "0"): 0, ("a", "1"): 79}
    assert samples(text, "DCGM_FI_DEV_GPU_TEMP")[("a", "0")] == 96
    assert samples(text, "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS")[("a", "0")] == 96
    assert dcgm.render("b") is None
    dcgm.set_dropout("b", on=False)
    assert samples(dcgm.render("b") or "", "DCGM_FI_DEV_GPU_UTIL")[("b", "0")] == 10


def test_trace_scenario_maps_containers_to_gpus(tmp_path: Path) -> None:
    trace = tmp_path / "duty.csv"
    trace.write_text("value,timestamp_anon,container_ip\n"
                     "10.0,1000.0,c1\n20.0,1000.0,c2\n30.0,1060.0,c1\n40.0,1060.0,c2\n"
                     "50.0,1120.0,c3\n")
    scenario = Trace(trace, gpus_per_node=2)
    # GPUs in order play containers c1, c2, c3, then wrap to c1.
    assert [scenario.util(0, 0, 0), scenario.util(0, 1, 0)] == [10, 20]
    assert [scenario.util(0, 0, 61), scenario.util(0, 1, 61)] == [30, 40]
    assert scenario.util(1, 0, 30) == 0  # c3 had not started yet: idle
    assert scenario.util(1, 0, 125) == 50
    assert scenario.util(1, 1, 0) == 10  # wraps to c1
    fast = Trace(trace, gpus_per_node=2, speed=60)
    assert fast.util(0, 0, 1.5) == 30


@pytest.mark.skipif(not GENAI.exists(), reason="shared GenAI trace not present")
def test_trace_scenario_reads_the_genai_duty_cycle_file() -> None:
    scenario = Trace(GENAI, gpus_per_node=8, speed=600)
    values = [scenario.util(n, g, t) for n in range(4) for g in range(8) for t in (0, 60, 600)]
    assert all(0 <= v <= 100 for v in values)
    assert any(v > 0 for v in values)


def test_http_server_control_endpoint_and_file_sd(tmp_path: Path) -> None:
    sd = tmp_path / "targets.json"
    dcgm = SyntheticDcgm(Constant(5))
    with DcgmExporterServer(dcgm) as server:
        dcgm.on_nodes_changed = lambda nodes: write_file_sd(sd, server.address, nodes)
        control = ExporterControl(server.url)
        control.call("add", nodes=["n1", "n2"], gpus=2, model="T4")
        control.call("util", node="n1", util=77)
        control.call("xid", node="n2", gpu=0, xid=48)
        state = control.call("dropout", node="n2")
        assert state["n2"]["dropout"] is True and state["n1"]["util"] == 77
        code, text = get(f"{server.url}/metrics/n1")
        assert code == 200 and samples(text, "DCGM_FI_DEV_GPU_UTIL")[("n1", "1")] == 77
        assert get(f"{server.url}/metrics/n2")[0] == 503
        assert get(f"{server.url}/metrics/unknown")[0] == 503
        targets = json.loads(sd.read_text())
        assert targets == [
            {"targets": [server.address], "labels": {"__metrics_path__": "/metrics/n1",
                                                     "instance": "n1"}},
            {"targets": [server.address], "labels": {"__metrics_path__": "/metrics/n2",
                                                     "instance": "n2"}},
        ]
        control.call("remove", node="n2")
        assert [t["labels"]["instance"] for t in json.loads(sd.read_text())] == ["n1"]
        with pytest.raises(urllib.error.HTTPError) as err:
            control.call("explode", node="n1")
        assert err.value.code == 400


def test_runs_as_a_process_with_help_and_control(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "autoscaler.sandbox.fakes.dcgm_exporter", "--help"],
                         capture_output=True, text=True, timeout=60, check=True).stdout
    assert "--trace" in out and "--file-sd" in out
    port = free_port()
    sd = tmp_path / "sd.json"
    proc = ManagedProcess("dcgm-exporter", [
        sys.executable, "-m", "autoscaler.sandbox.fakes.dcgm_exporter", "--port", str(port),
        "--nodes", "p1", "--gpus", "2", "--ramp", "0", "100", "3600", "--file-sd", str(sd),
    ], tmp_path / "exporter.log")
    try:
        wait_until(lambda: get(f"http://127.0.0.1:{port}/health")[0] == 200, 30,
                   "exporter health", proc=proc)
        ExporterControl(f"http://127.0.0.1:{port}").call("util", util=64)
        code, text = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and samples(text, "DCGM_FI_DEV_GPU_UTIL")[("p1", "0")] == 64
        assert json.loads(sd.read_text())[0]["labels"]["instance"] == "p1"
    finally:
        proc.stop()
    assert not proc.alive()


def test_ecc_errors_add_up_and_double_bit_errors_remap_rows() -> None:
    dcgm = SyntheticDcgm(Constant(10))
    dcgm.add_node("n1", gpus=2)
    dcgm.inject_ecc("n1", gpu=1, single=3, double=1)
    dcgm.inject_ecc("n1", gpu=1)
    text = dcgm.render("n1") or ""

    def per_gpu(metric: str) -> dict[str, float]:  # raw lines: these names end in _TOTAL
        return {m[1]: float(m[2]) for m in re.finditer(
            rf'^{metric}{{gpu="(\d)"[^}}]*}} (\S+)$', text, re.M)}

    assert per_gpu("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL") == {"0": 0, "1": 2}
    assert per_gpu("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL")["1"] == 3
    assert per_gpu("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS")["1"] == 2
    with pytest.raises(ControlError):
        dcgm.inject_ecc("nope")
