"""A synthetic NVIDIA dcgm-exporter: N nodes x G GPUs in one process.

The text format, metric names, ``# HELP``/``# TYPE`` lines and labels (``gpu``, ``UUID``,
``pci_bus_id``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``) follow
dcgm-exporter 4.x (``internal/pkg/rendermetrics/render_metrics.go`` and
``etc/default-counters.csv``), plus ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` as operators add
it to their counters file. ``GET /metrics/<node>`` is one node (one Prometheus target per
sandbox instance, labelled with the node name); ``GET /metrics`` is every node.

Load comes from a scenario (constant, ramp, or a recorded duty-cycle trace) and can be
changed at run time over ``POST /control/<verb>`` (JSON body); see ``ExporterControl``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.request import Request, urlopen

from autoscaler.sandbox.fakes.dcgm_scenarios import Constant, Ramp, Scenario, Trace
from autoscaler.sandbox.fakes.threaded_http import ThreadedHttpServer

DRIVER_VERSION = "550.54.15"
# modelName as nvidia-smi reports it, and the framebuffer size in MiB.
GPU_MODELS: dict[str, tuple[str, int]] = {
    "V100": ("Tesla V100-SXM2-16GB", 16384),
    "T4": ("Tesla T4", 15360),
    "A10G": ("NVIDIA A10G", 23028),
    "A100": ("NVIDIA A100-SXM4-40GB", 40960),
}
THERMAL_THROTTLE = 0x20 | 0x40  # NVML clocksThrottleReasonSw/HwThermalSlowdown

# (field, type, help) in dcgm-exporter's default-counters.csv order.
COUNTERS: tuple[tuple[str, str, str], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
    ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "counter",
     "Total energy consumption since boot (in mJ)."),
    ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
    ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
    ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
    ("DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "counter", "Total number of single-bit volatile ECC errors."),
    ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "counter", "Total number of double-bit volatile ECC errors."),
    ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for correctable errors"),
    ("DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "counter",
     "Number of remapped rows for uncorrectable errors"),
    ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
    ("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Current clock throttle reasons."),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
    ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
    ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
    ("DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "gauge",
     "Ratio of cycles the tensor (HMMA) pipe is active."),
    ("DCGM_FI_PROF_DRAM_ACTIVE", "gauge",
     "Ratio of cycles the device memory interface is active sending or receiving data."),
)


@dataclass
class NodeSpec:
    name: str
    index: int
    gpus: int
    model: str
    util: float | None = None  # overrides the scenario for every GPU of the node
    gpu_util: dict[int, float] = field(default_factory=dict)
    temperature: float | None = None
    xid: dict[int, int] = field(default_factory=dict)
    ecc: dict[int, tuple[int, int]] = field(default_factory=dict)  # gpu -> (single, double)
    throttle: int = 0
    dropout: bool = False


class ControlError(ValueError):
    """A control request names an unknown node or carries a bad value."""


class SyntheticDcgm:
    """Thread-safe state of every simulated GPU; renders dcgm-exporter text."""

    def __init__(self, scenario: Scenario, clock: Callable[[], float] = time.monotonic,
                 on_nodes_changed: Callable[[list[str]], None] | None = None):
        self.scenario = scenario
        self._clock = clock
        self._start = clock()
        self._lock = threading.Lock()
        self._nodes: dict[str, NodeSpec] = {}
        self._next_index = 0
        self.on_nodes_changed = on_nodes_changed

    def nodes(self) -> list[str]:
        with self._lock:
            return list(self._nodes)

    def add_node(self, name: str, gpus: int = 8, model: str = "V100") -> None:
        if model not in GPU_MODELS:
            raise ControlError(f"unknown GPU model {model!r} (known: {', '.join(GPU_MODELS)})")
        if gpus < 1:
            raise ControlError("gpus must be >= 1")
        with self._lock:
            if name not in self._nodes:
                self._nodes[name] = NodeSpec(name, self._next_index, gpus, model)
                self._next_index += 1
        self._changed()

    def remove_node(self, name: str) -> None:
        with self._lock:
            self._nodes.pop(name, None)
        self._changed()

    def set_util(self, util: float | None, node: str | None = None, gpu: int | None = None) -> None:
        """Pin utilization (None: back to the scenario) for a GPU, a node, or all nodes."""
        if util is not None and not 0 <= util <= 100:
            raise ControlError("util must be within 0..100")
        with self._lock:
            for spec in self._select(node):
                if gpu is None:
                    spec.util, spec.gpu_util = util, {}
                elif util is None:
                    spec.gpu_util.pop(gpu, None)
                else:
                    spec.gpu_util[gpu] = util

    def set_temperature(self, celsius: float | None, node: str | None = None) -> None:
        with self._lock:
            for spec in self._select(node):
                spec.temperature = celsius

    def inject_xid(self, node: str, gpu: int = 0, xid: int = 79) -> None:
        """The GPU reports ``xid`` as its last XID error (0 clears it)."""
        with self._lock:
            for spec in self._select(node):
                spec.xid[gpu] = xid

    def inject_ecc(self, node: str, gpu: int = 0, single: int = 0, double: int = 1) -> None:
        """Add ECC errors to a GPU's volatile counters; each double-bit error also remaps
        a row (uncorrectable), as an A100/H100 does."""
        with self._lock:
            for spec in self._select(node):
                sbe, dbe = spec.ecc.get(gpu, (0, 0))
                spec.ecc[gpu] = (sbe + single, dbe + double)

    def set_throttle(self, reasons: int, node: str | None = None) -> None:
        with self._lock:
            for spec in self._select(node):
                spec.throttle = reasons

    def set_dropout(self, node: str, on: bool = True) -> None:
        """A dropped-out node's target answers 503 (the scrape fails, series go stale)."""
        with self._lock:
            for spec in self._select(node):
                spec.dropout = on

    def _select(self, node: str | None) -> list[NodeSpec]:
        if node is None:
            return list(self._nodes.values())
        if node not in self._nodes:
            raise ControlError(f"unknown node {node!r}")
        return [self._nodes[node]]

    def _changed(self) -> None:
        if self.on_nodes_changed is not None:
            self.on_nodes_changed(self.nodes())

    def state(self) -> dict[str, Any]:
        with self._lock:
            return {n: {"gpus": s.gpus, "model": s.model, "util": s.util, "dropout": s.dropout,
                        "temperature": s.temperature, "xid": s.xid, "throttle": s.throttle,
                        "ecc": s.ecc}
                    for n, s in self._nodes.items()}

    def render(self, node: str | None = None) -> str | None:
        """Exposition text for one node (None if unknown or dropped out) or all live nodes."""
        elapsed = self._clock() - self._start
        with self._lock:
            if node is not None:
                spec = self._nodes.get(node)
                if spec is None or spec.dropout:
                    return None
                specs = [spec]
            else:
                specs = [s for s in self._nodes.values() if not s.dropout]
            rows = [(s, g, _gpu_values(s, g, self._gpu_util(s, g, elapsed)))
                    for s in specs for g in range(s.gpus)]
        return _exposition(rows)

    def _gpu_util(self, spec: NodeSpec, gpu: int, elapsed: float) -> float:
        if gpu in spec.gpu_util:
            return spec.gpu_util[gpu]
        if spec.util is not None:
            return spec.util
        return max(0.0, min(100.0, self.scenario.util(spec.index, gpu, elapsed)))


def _uuid(node: str, gpu: int) -> str:
    h = hashlib.sha1(f"{node}/{gpu}".encode()).hexdigest()
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _gpu_values(spec: NodeSpec, gpu: int, util: float) -> dict[str, float]:
    """Plausible, deterministic readings derived from utilization."""
    total = GPU_MODELS[spec.model][1]
    used = round(300 + (total - 800) * util / 100)
    temp = spec.temperature if spec.temperature is not None else round(34 + util * 0.4)
    power = round(40 + util * 2.1, 3)
    sbe, dbe = spec.ecc.get(gpu, (0, 0))
    return {
        "DCGM_FI_DEV_SM_CLOCK": 1380 if util > 0 else 135,
        "DCGM_FI_DEV_MEM_CLOCK": 877,
        "DCGM_FI_DEV_MEMORY_TEMP": temp - 2,
        "DCGM_FI_DEV_GPU_TEMP": temp,
        "DCGM_FI_DEV_POWER_USAGE": power,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 0,  # filled per GPU below
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_GPU_UTIL": round(util),
        "DCGM_FI_DEV_MEM_COPY_UTIL": round(util * 0.6),
        "DCGM_FI_DEV_ENC_UTIL": 0,
        "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_XID_ERRORS": spec.xid.get(gpu, 0),
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": sbe,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": dbe,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": dbe,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": spec.throttle,
        "DCGM_FI_DEV_FB_FREE": total - used - 300,
        "DCGM_FI_DEV_FB_USED": used,
        "DCGM_FI_DEV_FB_RESERVED": 300,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": round(util / 100, 6),
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": round(util / 250, 6),
        "DCGM_FI_PROF_DRAM_ACTIVE": round(util / 200, 6),
    }


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def _exposition(rows: Iterable[tuple[NodeSpec, int, dict[str, float]]]) -> str:
    rows = list(rows)
    labels = [
        f'gpu="{g}",UUID="{_uuid(s.name, g)}",pci_bus_id="00000000:{g + 0x10:02X}:00.0",'
        f'device="nvidia{g}",modelName="{GPU_MODELS[s.model][0]}",Hostname="{s.name}",'
        f'DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
        for s, g, _ in rows
    ]
    out: list[str] = []
    for name, kind, help_text in COUNTERS:
        out.append(f"# HELP {name} {help_text}")
        out.append(f"# TYPE {name} {kind}")
        for (_, _, values), lab in zip(rows, labels, strict=True):
            out.append(f"{name}{{{lab}}} {_fmt(values[name])}")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- HTTP server

def _names(body: dict[str, Any]) -> list[str]:
    names = body.get("nodes") or [body.get("node")]
    if not all(isinstance(n, str) and n for n in names):
        raise ControlError("give 'node' or 'nodes'")
    return list(names)


def _add(dcgm: SyntheticDcgm, body: dict[str, Any]) -> None:
    for name in _names(body):
        dcgm.add_node(name, int(body.get("gpus", 8)), str(body.get("model", "V100")))


def _remove(dcgm: SyntheticDcgm, body: dict[str, Any]) -> None:
    for name in _names(body):
        dcgm.remove_node(name)


def _control(dcgm: SyntheticDcgm, verb: str, body: dict[str, Any]) -> dict[str, Any]:
    node = body.get("node")
    actions: dict[str, Callable[[], None]] = {
        "util": lambda: dcgm.set_util(body.get("util"), node, body.get("gpu")),
        "add": lambda: _add(dcgm, body),
        "remove": lambda: _remove(dcgm, body),
        "temperature": lambda: dcgm.set_temperature(body.get("celsius"), node),
        "xid": lambda: dcgm.inject_xid(str(node), int(body.get("gpu", 0)), int(body.get("xid", 79))),
        "ecc": lambda: dcgm.inject_ecc(str(node), int(body.get("gpu", 0)), int(body.get("single", 0)),
                                       int(body.get("double", 1))),
        "throttle": lambda: dcgm.set_throttle(int(body.get("reasons", THERMAL_THROTTLE)), node),
        "dropout": lambda: dcgm.set_dropout(str(node), bool(body.get("on", True))),
    }
    if verb not in actions:
        raise ControlError(f"unknown control verb {verb!r} (known: {', '.join(actions)})")
    actions[verb]()
    return dcgm.state()


def make_handler(dcgm: SyntheticDcgm) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass  # scrapes every second would flood the log

        def _send(self, code: int, body: str, ctype: str = "text/plain; version=0.0.4") -> None:
            data = body.encode()
            self.send_response(code)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self.wfile.write(data)  # a scraper that gave up (e.g. Prometheus stopping)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0].rstrip("/")
            if path == "/health":
                self._send(200, "OK")
            elif path == "/control/state":
                self._send(200, json.dumps(dcgm.state()), "application/json")
            elif path == "/metrics" or path.startswith("/metrics/"):
                node = path.removeprefix("/metrics").lstrip("/") or None
                text = dcgm.render(node)
                self._send(200, text) if text is not None else self._send(503, "no data\n")
            else:
                self._send(404, "not found\n")

        def do_POST(self) -> None:
            verb = self.path.removeprefix("/control/").strip("/")
            try:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length) or b"{}")
                state = _control(dcgm, verb, body)
            except (ControlError, ValueError, TypeError) as exc:
                self._send(400, json.dumps({"error": str(exc)}), "application/json")
                return
            self._send(200, json.dumps(state), "application/json")

    return Handler


class DcgmExporterServer(ThreadedHttpServer):
    """Serves a ``SyntheticDcgm`` on 127.0.0.1 from a thread; a context manager."""

    def __init__(self, dcgm: SyntheticDcgm, port: int = 0, host: str = "127.0.0.1"):
        self.dcgm = dcgm
        super().__init__(ThreadingHTTPServer((host, port), make_handler(dcgm)), "dcgm-exporter")


class ExporterControl:
    """Client of the control endpoint, for tests and the demo."""

    def __init__(self, url: str, timeout: float = 5.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def call(self, verb: str, **body: Any) -> dict[str, Any]:
        req = Request(f"{self.url}/control/{verb}", data=json.dumps(body).encode(),
                      headers={"Content-Type": "application/json"}, method="POST")
        with urlopen(req, timeout=self.timeout) as resp:
            result: dict[str, Any] = json.loads(resp.read())
            return result


def _scenario(args: argparse.Namespace) -> Scenario:
    if args.trace is not None:
        return Trace(args.trace, args.gpus, speed=args.speed)
    if args.ramp is not None:
        start, end, seconds = args.ramp
        return Ramp(start, end, seconds)
    return Constant(args.util)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m autoscaler.sandbox.fakes.dcgm_exporter",
        description="Synthetic dcgm-exporter: /metrics, /metrics/<node>, POST /control/<verb> "
        "(util, add, remove, temperature, xid, ecc, throttle, dropout), GET /control/state.",
    )
    parser.add_argument("--port", type=int, default=9400)
    parser.add_argument("--nodes", nargs="*", default=[], help="Node names served at start.")
    parser.add_argument("--gpus", type=int, default=8, help="GPUs per node.")
    parser.add_argument("--model", default="V100", choices=sorted(GPU_MODELS))
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--util", type=float, default=0.0, help="Constant utilization %%.")
    load.add_argument("--ramp", type=float, nargs=3, metavar=("START", "END", "SECONDS"))
    load.add_argument("--trace", type=Path, help="Duty-cycle CSV(.gz): value,timestamp_anon,"
                      "container_ip (e.g. the Alibaba GenAI 2026 file).")
    parser.add_argument("--speed", type=float, default=1.0, help="Trace seconds per second.")
    parser.add_argument("--file-sd", type=Path, help="Rewrite this Prometheus file_sd JSON "
                        "whenever nodes come and go.")
    args = parser.parse_args(argv)
    from autoscaler.sandbox.services.prometheus import write_file_sd

    server: DcgmExporterServer | None = None

    def changed(nodes: list[str]) -> None:
        if args.file_sd is not None and server is not None:
            write_file_sd(args.file_sd, server.address, nodes)

    dcgm = SyntheticDcgm(_scenario(args), on_nodes_changed=changed)
    server = DcgmExporterServer(dcgm, port=args.port)
    for name in args.nodes:
        dcgm.add_node(name, args.gpus, args.model)
    changed(dcgm.nodes())
    print(f"dcgm-exporter (synthetic) serving {len(args.nodes)} nodes on {server.url}", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()


if __name__ == "__main__":
    main()
