"""``python -m autoscaler.sandbox.stack.supervisor --dir D``: keeps a SandboxStack running.

``gpu-autoscaler sandbox up`` starts this process detached (its own session) and returns
once the state file says ``ready``; ``sandbox down`` sends it SIGTERM, and it stops every
component it started. Its log is ``D/sandbox.log``.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from autoscaler.sandbox.stack.local import SandboxStack, StackOptions


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m autoscaler.sandbox.stack.supervisor")
    p.add_argument("--dir", type=Path, required=True)
    p.add_argument("--policies", type=Path, default=None)
    p.add_argument("--prices", type=Path, default=None)
    p.add_argument("--util", type=float, default=0.0)
    p.add_argument("--tick", default="5s")
    p.add_argument("--http-port", type=int, default=0)
    p.add_argument("--unprivileged", action="store_true",
                   help="No Slurm and no SSH hosts, even as root.")
    p.add_argument("--slurm-registration", choices=["dynamic", "declared"], default="dynamic")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = threading.Event()

    def on_signal(signum: int, _frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    options = StackOptions(policies_dir=args.policies, prices_file=args.prices, util=args.util,
                           tick_interval=args.tick, http_port=args.http_port,
                           privileged=False if args.unprivileged else None,
                           slurm_registration=args.slurm_registration)
    try:
        stack = SandboxStack(args.dir, options).start()
    except Exception:  # the stack recorded status "failed" and its error
        logging.getLogger(__name__).exception("sandbox failed to start")
        return 1
    try:
        stop.wait()
    finally:
        stack.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
