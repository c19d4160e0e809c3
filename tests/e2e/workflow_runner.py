"""Runs the ``run:`` steps of a GitHub Actions workflow file as the runner would, locally.

Just enough of the runner for ``examples/ci/github-actions.yml``: the job's ``env``, the
``${{ secrets.X }}`` / ``${{ steps.ID.outputs.K }}`` expressions, ``$GITHUB_OUTPUT``, step
``if:`` made of ``always()`` and ``steps.ID.outputs.K != ''`` terms, ``bash -e`` for each
step, and skipping later steps after a failure unless their ``if`` says ``always()``. An
expression it does not know fails the test rather than being guessed at. ``uses:`` steps
(checkout) are the caller's job: the working directory is the checkout.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
OUTPUT_TERM = re.compile(r"^steps\.([a-z_-]+)\.outputs\.([a-z_-]+)\s*!=\s*''$")


class WorkflowError(AssertionError):
    pass


@dataclass
class StepResult:
    name: str
    rc: int | None  # None: skipped
    stdout: str
    stderr: str


@dataclass
class WorkflowRun:
    path: Path
    job: str
    secrets: dict[str, str]
    workdir: Path
    env: dict[str, str]  # the process environment (PATH, PYTHONPATH, SLURM_CONF...)
    overrides: dict[str, str] = field(default_factory=dict)  # job env values replaced
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    results: list[StepResult] = field(default_factory=list)

    def expand(self, text: str) -> str:
        def one(match: re.Match[str]) -> str:
            expr = match.group(1)
            parts = expr.split(".")
            if parts[0] == "secrets" and len(parts) == 2:
                return self.secrets[parts[1]]
            if parts[0] == "steps" and len(parts) == 4 and parts[2] == "outputs":
                return self.outputs.get(parts[1], {}).get(parts[3], "")
            raise WorkflowError(f"expression not supported by the test runner: {expr}")
        return EXPR.sub(one, text)

    def condition(self, text: str | None, failed: bool) -> bool:
        if text is None:
            return not failed
        always = False
        for term in (t.strip() for t in text.split("&&")):
            if term == "always()":
                always = True
            elif (m := OUTPUT_TERM.match(term)) is not None:
                if not self.outputs.get(m.group(1), {}).get(m.group(2), ""):
                    return False
            else:
                raise WorkflowError(f"if: term not supported by the test runner: {term}")
        return always or not failed

    def run(self, timeout_s: float) -> list[StepResult]:
        spec: Any = YAML(typ="safe").load(self.path.read_text())["jobs"][self.job]
        job_env = {k: self.expand(str(v)) for k, v in (spec.get("env") or {}).items()}
        job_env |= self.overrides
        failed = False
        for n, step in enumerate(spec["steps"]):
            if "run" not in step:
                continue  # uses: (checkout) is the caller's working directory
            name = step.get("name", f"step {n}")
            if not self.condition(step.get("if"), failed):
                self.results.append(StepResult(name, None, "", ""))
                continue
            out_file = self.workdir / f".github_output_{n}"
            out_file.write_text("")
            env = {**self.env, **job_env, "GITHUB_OUTPUT": str(out_file),
                   "GITHUB_RUN_ID": "4711", "GITHUB_RUN_ATTEMPT": "1"}
            done = subprocess.run(["bash", "-e", "-c", self.expand(step["run"])],
                                  cwd=self.workdir, env=env, capture_output=True, text=True,
                                  timeout=timeout_s)
            self.results.append(StepResult(name, done.returncode, done.stdout, done.stderr))
            if "id" in step:
                self.outputs[step["id"]] = dict(
                    line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
            failed = failed or done.returncode != 0
        return self.results


__all__ = ["StepResult", "WorkflowError", "WorkflowRun"]
