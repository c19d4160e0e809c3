"""Baked images on the sandbox: how much sooner is a node from a baked image READY?

Every component real (``tests/e2e/bake_rig.py``: moto + Terraform, booted test hosts
bootstrapped over SSH by the real playbook, real Slurm, the executor as the service wires
it). ``gpu-autoscaler image bake`` makes the baked pool's image once; then ``--rounds``
times a baked and a cold (base image) node of the same type are launched in the same tick,
ticked until both are READY, and destroyed again.

* a = boot_to_ready_cold_s: instance created (BOOTSTRAPPING) -> READY of the cold node,
  median of the rounds: the whole playbook, with the driver's reboot;
* b = boot_to_ready_baked_s: the same for the node from the baked image: ``--tags node``
  only, no reboot;
* bake_s: the bake's wall time (builder, ``--tags image``, image, builder destroyed).
* c = boot_to_ready_warm_s: then a warm pool of 2 (``tests/e2e/test_warm_pool_e2e.py``'s
  policy) fills; a pending Slurm job starts a stopped warm node (the same instance,
  booted again from its disk): its instance started (STARTING -> BOOTSTRAPPING) -> READY,
  the same span as a and b, median of up to 2 starts (the pool's max_nodes), each from a
  full pool with no refill booting (on the sandbox they would share one instance
  follower; a start behind a refill's first boot was once 94 s instead of 16). What the
  start's own apply adds (STARTING -> BOOTSTRAPPING, the ``aws_ec2_instance_state``
  change) is printed beside it, as a's and b's creates are not counted either.

Targets (issue 37): b <= 0.5 x a, c <= 0.25 x a. What the sandbox cannot show: its
image-time part installs no driver, CUDA or DCGM (they are ``gpu-hardware`` tasks, skipped
without GPUs), so the cold node pays only the file tasks and one reboot of a container that
boots in seconds; on a GPU instance the skipped installs take minutes, all of which a baked
or warm node saves. ``--sim`` replays warm pools on the benchmark trace
(benchmarks/warm_sim.py). The sandbox half needs root, Slurm and Terraform.

    sudo python benchmarks/bench_warm.py [--rounds 3]
    python benchmarks/bench_warm.py --sim [--days 40] [--seed 0] [--warm-max 8]

Last line: boot_to_ready_cold_s=<a> boot_to_ready_baked_s=<b> boot_to_ready_warm_s=<c>
baked_over_cold=<b/a> warm_over_cold=<c/a> bake_s=<s>
(--sim: p95_wait_cold_s=<d> p95_wait_warm_forecast_s=<e> p50_wait_warm_forecast_s=<f>
cost_ratio_warm_over_predictive=<g>, see warm_sim.py)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

# The benchmark drives the e2e rig in tests/: run from anywhere, import it from the repo.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_sim import START_DAY, trace_parser  # the same window and data


def main(argv: list[str] | None = None) -> int:
    parser = trace_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="baked + cold launches (default 3)")
    parser.add_argument("--sim", action="store_true", help="warm pools in the simulator (no root)")
    parser.add_argument("--days", type=int, default=40, help=f"--sim: days from day {START_DAY} (default 40)")
    parser.add_argument("--warm-max", type=int, default=8, help="--sim: warm_pool.max (default 8)")
    parser.add_argument("--warm-size", type=int, default=None,
                        help="--sim: a fixed warm_pool.size instead of forecast (e and f then "
                        "describe that size, not the forecast)")
    parser.add_argument("--capacity", choices=("on-demand", "fallback", "bench"),
                        default="on-demand",
                        help="--sim: the pool's market in every replay. on-demand (default): "
                        "spot_percent 0; fallback: spot_fallback on-demand. Both have the "
                        "on-demand warm nodes the service runs. bench: the benchmark's spot-only "
                        "pool, whose warm nodes are spot, which the service refuses (the default "
                        "before 2026-12-05)")
    parser.add_argument("--workers", type=int, default=2, help="--sim: replays at once")
    args = parser.parse_args(argv)
    if args.sim:
        from warm_sim import run  # the simulator half: no sandbox, Slurm or root

        return run(args)
    return sandbox(args)


def sandbox(args: argparse.Namespace) -> int:
    from autoscaler.sandbox.stack.local import SandboxStack, StackOptions, privileged
    from tests.e2e.bake_rig import S, boot_to_ready, cli, write_policy
    from tests.e2e.test_lifecycle_e2e import Loop
    from tests.e2e.test_warm_pool_e2e import write_policy as warm_policy

    if not privileged() or shutil.which("terraform") is None:
        print("needs root (network namespaces, booted hosts), Slurm and terraform", file=sys.stderr)
        return 2
    # SIGTERM unwinds like Ctrl-C: the stack stops every process and host it started.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    root = Path(tempfile.mkdtemp(prefix="bench-warm-"))
    try:
        write_policy(root / "policies", 0)
        with SandboxStack(root / "sandbox", StackOptions(policies_dir=root / "policies")) as stack:
            os.environ.update(stack.env())
            started = time.monotonic()
            baked = cli(stack, "bake")
            bake_s = time.monotonic() - started
            if baked.returncode != 0:
                print(baked.stdout + baked.stderr, file=sys.stderr)
                return 1
            print(f"bake: {bake_s:.0f} s")
            loop = Loop(stack, write_policy(root / "policies", 0))
            cold, hot = [], []
            for n in range(1, args.rounds + 1):
                loop.policies = write_policy(root / "policies", 1)
                loop.until(lambda: sum(1 for n in loop.store.nodes() if n.state is S.READY) == 2,
                           600, "both READY")
                nodes = {node.pool: node.name for node in loop.store.nodes()}
                steps = boot_to_ready(loop.store, nodes.values())
                cold.append(steps[nodes["cold"]]["boot_to_ready"])
                hot.append(steps[nodes["baked"]]["boot_to_ready"])
                print(f"round {n}: cold {cold[-1]:.1f} s, baked {hot[-1]:.1f} s ({steps}); "
                      f"cold {playbook_time(stack, nodes['cold'])}, "
                      f"baked {playbook_time(stack, nodes['baked'])}")
                loop.policies = write_policy(root / "policies", 0)
                loop.until(lambda: not loop.store.nodes(), 600, "both destroyed")
            warm, start_apply = warm_starts(stack, loop, warm_policy, root, min(args.rounds, 2))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    a, b, c = statistics.median(cold), statistics.median(hot), statistics.median(warm)
    print(f"warm starts: {warm} s after their start applies of {start_apply} s")
    print(f"boot_to_ready_cold_s={a:.1f} boot_to_ready_baked_s={b:.1f} boot_to_ready_warm_s={c:.1f} "
          f"baked_over_cold={b / a:.2f} warm_over_cold={c / a:.2f} bake_s={bake_s:.0f}")
    return 0


def warm_starts(stack, loop, warm_policy, root: Path, rounds: int) -> tuple[list[float], list[float]]:
    """Fill a warm pool of 2, then start its nodes one pending job at a time: per start, its
    instance started -> READY, and the start's apply (STARTING -> BOOTSTRAPPING)."""
    from tests.e2e.bake_rig import S

    loop.policies = warm_policy(root / "policies", 0)
    ready, applies = [], []
    for n in range(1, rounds + 1):
        # Each start from a full, settled pool: a refill's first boot would share the
        # sandbox's one instance follower with the start (EC2 boots them side by side).
        loop.until(lambda: sum(1 for x in loop.store.nodes() if x.pool == "warm"
                               and x.state is S.WARM) == 2 and not any(
            x.progress.in_warm_pool and x.state is not S.WARM for x in loop.store.nodes()),
            600, "two WARM nodes and nothing else in the warm pool")
        stack.slurm.submit("sleep 900", gpus=1, partition="gpu", name=f"bench-warm-{n}")
        loop.until(lambda n=n: sum(1 for x in loop.store.nodes() if x.pool == "warm"
                                   and x.state is S.READY) == n, 600, f"{n} started warm node(s) READY")
        at = {(t.node, t.to_state): t.at for t in loop.store.transitions()}
        started = sorted((x for x in loop.store.nodes() if x.pool == "warm" and x.state is S.READY),
                         key=lambda x: at[(x.name, "READY")])[-1].name
        booted = max(t for (node, state), t in at.items() if node == started and state == "BOOTSTRAPPING")
        ready.append(round((at[(started, "READY")] - booted).total_seconds(), 1))
        applies.append(round((booted - at[(started, "STARTING")]).total_seconds(), 1))
        print(f"warm start {n}: {started} READY {ready[-1]} s after its instance started "
              f"(start apply {applies[-1]} s); {playbook_time(stack, started)}")
    return ready, applies


def playbook_time(stack, node: str) -> str:
    """Where a node's boot went, from the job events of its newest bootstrap run: the part,
    the run's wall time, how many tasks ran on it and the five slowest."""
    from tests.e2e.bake_rig import task_events

    newest = None
    for results in sorted((stack.dir / "ansible-runs").glob("*/results.json")):
        result = json.loads(results.read_text())
        if node in result["hosts"] and result.get("part") != "health":
            newest = (results.parent, result)
    if newest is None:
        return "no run"
    run_dir, result = newest
    tasks: dict[str, float] = {}
    for data in task_events(run_dir):
        if data.get("host") == node and "duration" in data:
            tasks[data["task"]] = tasks.get(data["task"], 0.0) + float(data["duration"])
    slowest = ", ".join(f"{name} {t:.1f}" for name, t in
                        sorted(tasks.items(), key=lambda kv: -kv[1])[:5])
    return (f"part {result.get('part')}: {result['duration_s']:.1f} s, {len(tasks)} tasks "
            f"{sum(tasks.values()):.1f} s (slowest: {slowest})")


if __name__ == "__main__":
    raise SystemExit(main())
