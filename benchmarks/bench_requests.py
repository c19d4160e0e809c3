"""Capacity requests on the sandbox: does a request add delay beyond the boot itself?

Every component real (``tests/e2e/request_rig.py``: moto + Terraform, booted test hosts
bootstrapped over SSH by the real playbook, real Slurm, the executor as the service wires
it, the keeper before each tick). ``--rounds`` times: an atomic request for 2 x g4dn.xlarge
is created through the HTTP API, ticked until Provisioned, then released with ``DELETE``
and ticked until both nodes are destroyed. Then one atomic request whose second node hits
InsufficientInstanceCapacity in moto.

* a = request_to_provisioned_s_p50: POST answered -> the request reads Provisioned;
* b = boot_to_ready_s_p50: REQUESTED -> READY of a request's slowest node (store times);
* c = release_to_terminated_s_p50: DELETE answered -> its last node TERMINATED;
* d = atomic_rollback_s: the failed node's PROVISION_FAILED -> the other node TERMINATED
  (store times).

Targets: a <= b + one tick (tick_s: the loop's median tick interval, printed too), d <= 120.
Needs root, Slurm and Terraform.

Last line: request_to_provisioned_s_p50=<a> boot_to_ready_s_p50=<b>
           release_to_terminated_s_p50=<c> atomic_rollback_s=<d>
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

# The benchmark drives the e2e rig in tests/: run from anywhere, import it from the repo.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from autoscaler.model.lifecycle import NodeState
from autoscaler.sandbox.stack.local import SandboxStack, privileged
from tests.e2e.request_rig import TOKEN, RequestLoop, request_stack, write_policy
from tests.requests.test_requests_api import call

S = NodeState
TWO = [{"instance_type": "g4dn.xlarge", "gpus": 1, "nodes": 2}]


class TimedLoop(RequestLoop):
    """Records when each tick starts, for the tick interval the target allows."""

    def __init__(self, *args: Any):
        super().__init__(*args)
        self.tick_starts: list[float] = []

    def tick(self) -> None:
        self.tick_starts.append(time.monotonic())
        super().tick()

    def tick_s(self) -> float:
        gaps = [b - a for a, b in zip(self.tick_starts, self.tick_starts[1:], strict=False)]
        return statistics.median(gaps) if gaps else float("nan")


def one_round(loop: TimedLoop, url: str, n: int) -> tuple[float, float, float]:
    started = time.monotonic()
    code, made = call(url, "POST", TOKEN, {"name": f"bench-{n}", "node_sets": TWO})
    if code != 201 or made["condition"] != "Accepted":
        raise RuntimeError(f"request not accepted: {code} {made}")
    rid = made["id"]
    loop.until(lambda: loop.condition(rid) == "Provisioned", 600, "Provisioned")
    provisioned = time.monotonic() - started
    names = sorted(loop.book.get(rid).nodes)  # type: ignore[union-attr]
    boot = max(loop.boot_seconds(names))
    released = time.monotonic()
    call(f"{url}/{rid}", "DELETE", TOKEN)
    loop.until(lambda: {loop.states()[x] for x in names} == {S.TERMINATED}, 400, "destroyed")
    gone = time.monotonic() - released
    print(f"round {n}: request_to_provisioned_s={provisioned:.1f} boot_to_ready_s={boot:.1f} "
          f"release_to_terminated_s={gone:.1f}", flush=True)
    return provisioned, boot, gone


def rollback(stack: SandboxStack, loop: TimedLoop, root: Path) -> float:
    loop.policies = write_policy(root / "two", "g4dn.xlarge, g4dn.2xlarge")
    assert stack.moto is not None
    stack.moto.fail_capacity("g4dn.2xlarge")
    try:
        code, made = loop.create({"name": "bench-rollback", "node_sets": [
            {"instance_type": "g4dn.xlarge", "gpus": 1, "nodes": 1},
            {"instance_type": "g4dn.2xlarge", "gpus": 1, "nodes": 1}]})
        if code != 201:
            raise RuntimeError(f"request not stored: {code} {made}")
        rid = made["id"]
        loop.until(lambda: loop.condition(rid) == "Failed", 400, "Failed")
        first, second = sorted(loop.book.get(rid).nodes)  # type: ignore[union-attr]
        loop.until(lambda: loop.states()[first] is S.TERMINATED, 400, f"{first} rolled back")
    finally:
        stack.moto.clear_faults()
    at = {(t.node, t.to_state): t.at for t in loop.store.transitions()}
    seconds = (at[(first, "TERMINATED")] - at[(second, "PROVISION_FAILED")]).total_seconds()
    print(f"rollback: {second} PROVISION_FAILED -> {first} TERMINATED in {seconds:.1f}s",
          flush=True)
    return seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not privileged() or shutil.which("terraform") is None:
        print("needs root, Slurm and Terraform")
        print("request_to_provisioned_s_p50=nan boot_to_ready_s_p50=nan "
              "release_to_terminated_s_p50=nan atomic_rollback_s=nan")
        return
    root = Path(tempfile.mkdtemp(prefix="bench-requests-"))
    saved = dict(os.environ)
    try:
        with request_stack(root) as stack:
            os.environ.update(stack.env())
            loop = TimedLoop(stack, write_policy(root / "one"))
            with loop.api() as url:
                rounds = [one_round(loop, url, n) for n in range(1, args.rounds + 1)]
            d = rollback(stack, loop, root)
            tick = loop.tick_s()
    finally:
        os.environ.clear()
        os.environ.update(saved)
        shutil.rmtree(root, ignore_errors=True)
    a, b, c = (statistics.median(r[i] for r in rounds) for i in range(3))
    print(f"tick_s={tick:.2f}; a <= b + one tick: {'met' if a <= b + tick else 'NOT met'} "
          f"(a - b = {a - b:.1f}s); d <= 120: {'met' if d <= 120 else 'NOT met'}")
    print(f"request_to_provisioned_s_p50={a:.1f} boot_to_ready_s_p50={b:.1f} "
          f"release_to_terminated_s_p50={c:.1f} atomic_rollback_s={d:.1f}")


if __name__ == "__main__":
    main()
