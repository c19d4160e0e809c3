"""``gpu-autoscaler run`` with a wall clock off by SKEW seconds, as on a host whose NTP
broke: ``python -m tests.service.skewed_service SKEW CONFIG``.

Everything the service does with time (its decisions, the node timestamps it writes,
timeouts) sees the skewed clock; only the database's clock may decide the lease.
"""

from __future__ import annotations

import signal
import sys
import threading
from datetime import datetime, timedelta
from pathlib import Path
from types import FrameType

from autoscaler.cli.run import configure_logging, read_config
from autoscaler.model.clock import utc_now
from autoscaler.service.wiring import build_service


def main(skew_s: str, config: str) -> None:
    skew = timedelta(seconds=float(skew_s))

    def skewed() -> datetime:
        return utc_now() + skew

    cfg = read_config(Path(config))
    configure_logging(cfg.log_level)
    service = build_service(cfg, clock=skewed)
    stop = threading.Event()

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    service.run(stop)


if __name__ == "__main__":
    main(*sys.argv[1:3])
