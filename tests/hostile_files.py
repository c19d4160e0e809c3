"""Malformed and hostile input files, one table shared by the CLI regression tests and
benchmarks/bench_hostile.py.

Each case is a file of one kind (a team policy, the service config, a recorded snapshot, a
trace) that must be refused with ``file:line``, exit status 1 and no traceback. ``line``
is the line the message must point at when the problem has a line of its own.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from tests.hostile import SPLIT, TF_FILE, jinja

REPO = Path(__file__).resolve().parents[1]
GOOD_POLICY = """\
team: vision
pools:
  - name: train
    cloud: aws
    region: us-east-1
    instance_types: [p3.2xlarge]
    max_nodes: 4
"""
USER_DATA_SECRET = "pw-4d2e-91"  # must never be repeated in a message
POD_HEADER = "name,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"


@dataclass(frozen=True)
class Case:
    name: str
    kind: str  # policy | config | snapshot | trace
    data: bytes
    line: int | None = None  # the line the error must name, when it has one

    @property
    def filename(self) -> str:
        return {"policy": "team.yaml", "config": "config.yaml", "snapshot": "snapshot.json",
                "trace": "pods.csv"}[self.kind]


def _pool(extra: str) -> bytes:
    return (GOOD_POLICY + extra).encode()


def _merge_chain(links: int) -> str:
    """Mappings each merging the one before and adding a key: link i holds i values, so a
    chain of 200 passes the 20,000-value limit at key k22 of m22 (line 67)."""
    return "m0: &m0 {team: vision}\n" + "".join(
        f"m{i}: &m{i}\n  <<: *m{i - 1}\n  k{i}: 1\n" for i in range(1, links))


def _merged_pools(links: int) -> str:
    """Pools each merging the one before; the first one's drain_timeout (line 9) is bad, so
    every pool's error must be found through up to links - 1 merges."""
    first = GOOD_POLICY.replace("  - name: train", "  - &p0\n    name: p0")
    return first + "    scale_down: {drain_timeout: 0s}\n" + "".join(
        f"  - &p{i} {{<<: *p{i - 1}, name: p{i}}}\n" for i in range(1, links))


def policy_cases() -> list[Case]:
    deep = "team: " + "[" * 600 + "]" * 600 + "\n"
    block = "team: vision\n" + "".join(" " * i + "a:\n" for i in range(300))
    laughs = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)) + GOOD_POLICY
    return [
        Case("non-utf8", "policy", b"team: vis\xffion\npools: []\n", 1),
        Case("nul", "policy", b"team: vision\n\x00pools: []\n", 2),
        Case("control-char", "policy", b"team: vision\npools: \x1b[31m\n", 2),
        Case("deep-flow", "policy", deep.encode(), 1),
        Case("deep-block", "policy", block.encode()),
        Case("billion-laughs", "policy", laughs.encode()),
        Case("oversized-1MB", "policy", (GOOD_POLICY + "#" + "x" * 1_048_576 + "\n").encode(), 1),
        Case("duration-overflow", "policy", _pool("    scale_down: {idle_for: 3000000d}\n"), 8),
        Case("duration-inf", "policy", _pool("    scale_up: {window: 1e999}\n"), 8),
        Case("cron-never-fires", "policy",
             _pool('    schedule: [{cron: "0 0 31 2 *", min_nodes: 1, duration: 1h}]\n'), 8),
        Case("cron-leap-day-only", "policy",
             _pool('    schedule: [{cron: "0 0 29 2 *", min_nodes: 1, duration: 1h}]\n'), 8),
        Case("cron-6-fields", "policy",
             _pool('    schedule: [{cron: "0 0 8 * * MON", min_nodes: 1, duration: 1h}]\n'), 8),
        Case("zero-window", "policy", _pool("    scale_up: {window: 0s}\n"), 8),
        Case("bool-as-int", "policy", GOOD_POLICY.replace("max_nodes: 4", "max_nodes: true").encode(), 7),
        Case("str-as-int", "policy", GOOD_POLICY.replace("max_nodes: 4", 'max_nodes: "4"').encode(), 7),
        Case("nodes-out-of-range", "policy", GOOD_POLICY.replace("max_nodes: 4", "max_nodes: 10000000").encode(), 7),
        Case("nan-percent", "policy", _pool("    scale_up: {gpu_utilization_above: .nan}\n"), 8),
        Case("jinja-driver", "policy", _pool(f"    bootstrap: {{driver: \"{jinja('cli')}\"}}\n"), 8),
        Case("jinja-prepull", "policy",
             _pool(f"    bootstrap: {{prepull: [\"x.io/a:{jinja('prepull')}\"]}}\n"), 8),
        Case("flag-prepull", "policy",
             _pool("    bootstrap: {prepull: ['--user=a:b x.io/a:1']}\n"), 8),
        Case("split-partition", "policy", _pool(f"    cluster: {{kind: slurm, partition: {SPLIT}}}\n"), 8),
        Case("tf-region", "policy", GOOD_POLICY.replace("us-east-1", f"'us-east-1{TF_FILE}'").encode(), 5),
        Case("unknown-region", "policy", GOOD_POLICY.replace("us-east-1", "us-nowhere-1").encode(), 5),
        Case("reserved-label", "policy",
             _pool("    cluster: {kind: kubernetes, labels: {gpu-autoscaler/team: other}}\n"), 8),
        Case("bad-signal", "policy", _pool("    scale_down: {checkpoint_signal: 'USR1; reboot'}\n"), 8),
        Case("merge-chain-200", "policy", _merge_chain(200).encode(), 67),
        Case("merge-chain-200-bad-value", "policy", _merged_pools(200).encode(), 9),
        Case("hex-int", "policy", GOOD_POLICY.replace("max_nodes: 4", "max_nodes: 0x10").encode(), 7),
        Case("underscore-int", "policy", GOOD_POLICY.replace("max_nodes: 4", "max_nodes: 1_0").encode(), 7),
        Case("yaml11-octal-int", "policy",
             ("%YAML 1.1\n---\n" + GOOD_POLICY.replace("max_nodes: 4", "max_nodes: 010")).encode(), 9),
        Case("tag-crash", "policy", GOOD_POLICY.replace("max_nodes: 4", 'max_nodes: !!int ""').encode(), 7),
        Case("cron-huge-step", "policy",
             _pool('    schedule: [{cron: "*/99999999999 * * * *", min_nodes: 1, duration: 1h}]\n'), 8),
        Case("scale-up-cooldown-0s", "policy", _pool("    scale_up: {cooldown: 0s}\n"), 8),
        Case("scale-down-cooldown-0s", "policy", _pool("    scale_down: {cooldown: 0s}\n"), 8),
        Case("drain-timeout-0s", "policy", _pool("    scale_down: {drain_timeout: 0s}\n"), 8),
        Case("max-node-age-0s", "policy", _pool("    lifetime: {max_node_age: 0s}\n"), 8),
        Case("not-a-mapping", "policy", b"- just\n- a list\n", 1),
        Case("yaml-error", "policy", b"team: vision\npools: [\n", 3),
    ]


def config_cases() -> list[Case]:
    return [
        Case("non-utf8", "config", b"policies_dir: po\xfflicies\n", 1),
        Case("nul", "config", b"policies_dir: policies\x00\n", 1),
        Case("deep", "config", ("a: " + "{b: " * 600 + "1" + "}" * 600 + "\n").encode(), 1),
        Case("oversized-1MB", "config", b"policies_dir: policies\n#" + b"x" * 1_048_576 + b"\n", 1),
        Case("duration-overflow", "config", b"policies_dir: policies\ntick: {interval: 3000000d}\n", 2),
        Case("wrong-type", "config", b"policies_dir: policies\nstore: {url: [1, 2]}\n", 2),
        Case("secret-in-user-data", "config", (
            "policies_dir: policies\nterraform:\n  regions:\n    aws/us-east-1:\n      ami: ami-1\n"
            f"      user_data: |\n        #!/bin/sh\n        export DB_PASSWORD={USER_DATA_SECRET}\n"
        ).encode(), 6),
    ]


def snapshot_cases() -> list[Case]:
    base = json.loads((REPO / "examples" / "snapshot.json").read_text())

    def variant(change: object) -> bytes:
        doc = json.loads(json.dumps(base))
        change(doc)  # type: ignore[operator]
        return json.dumps(doc, indent=2).encode()

    first = next(iter(base["snapshot"]["nodes"]))

    def neg(doc: dict) -> None:  # type: ignore[type-arg]
        doc["snapshot"]["nodes"][first]["scheduler"]["gpus_total"] = -8

    def util_500(doc: dict) -> None:  # type: ignore[type-arg]
        doc["snapshot"]["nodes"][first]["metrics"]["util_mean"] = 500

    def gpus_1e9(doc: dict) -> None:  # type: ignore[type-arg]
        doc["snapshot"]["nodes"][first]["scheduler"]["gpus_total"] = 1e9

    def two_pools(doc: dict) -> None:  # type: ignore[type-arg]
        doc["fleet"]["nodes"].append({**doc["fleet"]["nodes"][0], "pool": "t4-infer",
                                      "team": "search"})
    text = json.dumps(base, indent=2)
    taken_at_line = text[:text.index('"taken_at"')].count("\n") + 1

    def when(key: str, value: str) -> bytes:  # "now" or "taken_at", as the example has it
        old = f'"{key}": "{base[key] if key == "now" else base["snapshot"][key]}"'
        assert old in text
        return text.replace(old, f'"{key}": "{value}"').encode()
    return [
        # Past datetime's ends in taken_at - MAX_AGE or + SKEW: an OverflowError, not a refusal.
        Case("taken-at-9999", "snapshot", when("taken_at", "9999-12-31T23:59:00Z"), taken_at_line),
        Case("taken-at-year-1", "snapshot", when("taken_at", "0001-01-01T00:00:00Z"), taken_at_line),
        Case("now-9999", "snapshot", when("now", "9999-12-31T23:00:00Z"), 2),
        Case("now-years-after-taken-at", "snapshot", when("now", "2031-11-30T14:00:00Z"), 2),
        Case("non-utf8", "snapshot", text.encode().replace(b'"now"', b'"n\xffow"', 1), 2),
        Case("naive-now", "snapshot", text.replace('"now": "2026-11-30T14:00:00Z"',
                                                   '"now": "2026-11-30T14:00:00"').encode(), 2),
        Case("now-is-a-number", "snapshot", text.replace('"now": "2026-11-30T14:00:00Z"',
                                                         '"now": 5').encode(), 2),
        Case("nan", "snapshot", text.replace('"util_mean": ', '"util_mean": NaN, "x": ', 1).encode()),
        Case("negative-gpus", "snapshot", variant(neg)),
        Case("util-500", "snapshot", variant(util_500)),
        Case("more-gpus-than-the-type", "snapshot", variant(gpus_1e9)),
        Case("duplicate-node", "snapshot",
             variant(lambda d: d["fleet"]["nodes"].append(d["fleet"]["nodes"][0]))),
        Case("node-in-two-pools", "snapshot", variant(two_pools)),
        Case("deep", "snapshot", b"[" * 600 + b"]" * 600, 1),
        Case("duplicate-key", "snapshot", text.replace('"now": ', '"now": "x", "now": ', 1).encode()),
        Case("not-json", "snapshot", b"{now: 5}\n", 1),
    ]


def trace_cases() -> list[Case]:
    row = "p1,1,1000,,LS,Running,0,100,10\n"
    return [
        Case("non-utf8", "trace", (POD_HEADER + row).encode() + b"p2,1,1000,,LS,Running,0,\xff,10\n", 3),
        Case("nul", "trace", (POD_HEADER + "p1,1,1000,,LS,Running,0,\x00100,10\n").encode(), 2),
        Case("infinite-time", "trace", (POD_HEADER + "p1,1,1000,,LS,Running,0,inf,10\n").encode(), 2),
        Case("not-a-number", "trace", (POD_HEADER + "p1,1,1000,,LS,Running,0,soon,10\n").encode(), 2),
        Case("utf16", "trace", (POD_HEADER + row).encode("utf-16"), 1),
    ]


def all_cases() -> list[Case]:
    return policy_cases() + config_cases() + snapshot_cases() + trace_cases()


def command(case: Case, path: Path, policies: Path) -> list[str]:
    """The ``gpu-autoscaler`` arguments that read ``path`` as a file of its kind."""
    if case.kind == "policy":
        return ["policy", "validate", str(path.parent)]
    if case.kind == "config":
        return ["config", "validate", str(path)]
    if case.kind == "snapshot":
        return ["plan", "--snapshot", str(path), "--policies", str(policies)]
    return ["simulate", "--trace", str(path), "--policies", str(policies), "--days", "1"]


def place(case: Case, workdir: Path) -> Path:
    """Write the case's file in a directory of its own and return its path."""
    folder = workdir / f"{case.kind}-{case.name}"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / case.filename
    path.write_bytes(case.data)
    return path
