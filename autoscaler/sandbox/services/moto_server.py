"""A patched moto server on 127.0.0.1: the AWS endpoint of tests, benchmarks and the demo.

``python -m autoscaler.sandbox.services.moto_server --port P [--fault-file F] [--score-file S]``
applies the patches in :mod:`autoscaler.sandbox.services.moto_patches` and serves.
:class:`MotoSandbox` starts and stops that process (by PID), gives the endpoint and the
environment that points boto3 and Terraform at it, switches capacity faults on and off, and
sets the Spot placement scores it answers.
"""

from __future__ import annotations

import argparse
import json
import urllib.request
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Self

from autoscaler.sandbox.hosts.procs import ManagedProcess, ServiceProcess, free_port, port_open, wait_until

# Fake credentials: moto accepts any; these keep boto3/Terraform from looking elsewhere.
SANDBOX_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}
MOTO_AMI = "ami-1e749f67"  # present in moto's default AMI list in every region


@dataclass(frozen=True)
class CapacityFault:
    """Launches matching all non-empty fields fail with ``code``."""

    instance_type: str = ""
    zone: str = ""
    market: str = ""  # "spot" | "on-demand" | "" (both)
    code: str = "InsufficientInstanceCapacity"


@dataclass(frozen=True)
class SpotScoreRule:
    """GetSpotPlacementScores answers ``score`` (1-10) for ``zone`` (a name; the answer
    gives its id) when asked about ``region`` and, if any are named, exactly those types."""

    region: str
    zone: str
    score: int
    instance_types: tuple[str, ...] = ()


class MotoSandbox(ServiceProcess):
    """One moto server process with the project's patches, on a free loopback port."""

    def __init__(self, workdir: Path, port: int | None = None):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = port or free_port()
        self.fault_file = self.workdir / "moto-faults.json"
        self.score_file = self.workdir / "moto-spot-scores.json"
        self.log_path = self.workdir / "moto.log"

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Environment for boto3 and Terraform: fake keys plus the endpoint."""
        return {**SANDBOX_ENV, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self, timeout: float = 30.0) -> Self:
        self.clear_faults()
        self.set_spot_scores([])
        argv = ["python3", "-m", "autoscaler.sandbox.services.moto_server", "--port", str(self.port),
                "--fault-file", str(self.fault_file), "--score-file", str(self.score_file)]
        self.proc = ManagedProcess("moto", argv, self.log_path, env=SANDBOX_ENV)
        wait_until(lambda: port_open("127.0.0.1", self.port), timeout, "moto server port",
                   proc=self.proc)
        return self

    def fail_capacity(self, instance_type: str = "", zone: str = "", market: str = "",
                      code: str = "InsufficientInstanceCapacity") -> None:
        add_fault(self.fault_file, CapacityFault(instance_type, zone, market, code))

    def clear_faults(self) -> None:
        write_faults(self.fault_file, [])

    def set_spot_scores(self, scores: Sequence[SpotScoreRule]) -> None:
        """What GetSpotPlacementScores answers from now on (nothing by default)."""
        write_scores(self.score_file, scores)

    def enforce_iam(self, unchecked_calls: int = 0) -> None:
        """Check every call from now on against the caller's IAM policies, after the next
        ``unchecked_calls`` (moto's INITIAL_NO_AUTH_ACTION_COUNT, set on the running server
        so the setup before it, e.g. creating the IAM user, needs no count). Off by default:
        every other test runs with moto's fake keys, which IAM would refuse.

        moto checks the action and, for S3, SQS and IAM, the resource ARN; it does not
        evaluate tag conditions (an Allow with one counts as granted) and matches EC2
        statements against the resource ``*`` only."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset-auth", method="POST",
                                     data=str(unchecked_calls).encode(),
                                     # not a form: moto reads the raw body
                                     headers={"Content-Type": "text/plain"})
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def reset(self) -> None:
        """Forget every resource (moto's reset API)."""
        req = urllib.request.Request(f"{self.endpoint}/moto-api/reset", method="POST")
        with urllib.request.urlopen(req, timeout=10) as resp:
            resp.read()

    def client(self, service: str = "ec2", region: str = "us-east-1") -> Any:
        return sandbox_client(service, self.endpoint, region)


def sandbox_client(service: str, endpoint: str, region: str, *, attempts: int | None = None) -> Any:
    """A boto3 client of the sandbox's moto at ``endpoint``, with its fake keys; with
    ``attempts``, a call that finds nothing listening gives up after that many tries
    (botocore's default retries a refused connection for about 13 s)."""
    import boto3
    from botocore.config import Config

    config = None if attempts is None else Config(
        connect_timeout=3, retries={"max_attempts": attempts, "mode": "standard"})
    return boto3.client(service, region_name=region, endpoint_url=endpoint, config=config,
                        aws_access_key_id=SANDBOX_ENV["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=SANDBOX_ENV["AWS_SECRET_ACCESS_KEY"],
                        aws_session_token=SANDBOX_ENV["AWS_SESSION_TOKEN"])


# The fault and score files are the running server's only input about them (it reads them on
# every request), so the tests' MotoSandbox and `gpu-autoscaler sandbox fault|scores` both
# read, change and write the file rather than keep a list of their own.
def read_faults(path: Path) -> list[CapacityFault]:
    return [CapacityFault(**row) for row in read_rows(path)]


def write_faults(path: Path, faults: Sequence[CapacityFault]) -> None:
    _write_atomically(path, [asdict(f) for f in faults])


def add_fault(path: Path, fault: CapacityFault) -> None:
    write_faults(path, [*read_faults(path), fault])


def read_scores(path: Path) -> list[SpotScoreRule]:
    return [SpotScoreRule(**{**row, "instance_types": tuple(row.get("instance_types") or ())})
            for row in read_rows(path)]


def write_scores(path: Path, scores: Sequence[SpotScoreRule]) -> None:
    _write_atomically(path, [asdict(s) for s in scores])


def read_rows(path: Path) -> list[dict[str, Any]]:
    """The rules in a fault or score file: none without the file, or in an empty one."""
    if not path.exists():
        return []
    return list(json.loads(path.read_text() or "[]"))


def _write_atomically(path: Path, rows: list[dict[str, Any]]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(rows))
    tmp.replace(path)  # the server never reads half a file


def running_instances(ec2: Any, **filters: str) -> list[dict[str, Any]]:
    """Instances pending or running (moto lists terminated ones and pages at 100)."""
    return instances(ec2, ("pending", "running"), **filters)


def instances(ec2: Any, states: Sequence[str], **filters: str) -> list[dict[str, Any]]:
    """Instances in one of ``states`` (EC2's ``instance-state-name``) with the tags ``filters``."""
    flt = [{"Name": "instance-state-name", "Values": list(states)}]
    flt += [{"Name": f"tag:{k}", "Values": [v]} for k, v in filters.items()]
    out: list[dict[str, Any]] = []
    for page in ec2.get_paginator("describe_instances").paginate(Filters=flt):
        for reservation in page["Reservations"]:
            out.extend(reservation["Instances"])
    return out


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--fault-file", type=Path, default=None)
    parser.add_argument("--score-file", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.host not in ("127.0.0.1", "localhost"):
        parser.error("the sandbox serves on loopback only")

    from moto import server

    from autoscaler.sandbox.services.moto_patches import apply_all

    apply_all(args.fault_file, args.score_file)
    server.main(["-H", args.host, "-p", str(args.port)])


if __name__ == "__main__":
    main()
