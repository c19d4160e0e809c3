"""Runs the examples in ``examples/ci/`` locally, as their CI runners would.

One bash executor (:func:`run_bash`: its own process group, killed whole at the deadline)
and two small front-ends, each just enough of its runner for its example:

* :class:`WorkflowRun`, GitHub Actions: the job's ``env``, the ``${{ secrets.X }}`` /
  ``${{ steps.ID.outputs.K }}`` expressions, ``$GITHUB_OUTPUT``, ``shell: bash`` (from
  ``defaults.run`` or the step), step ``if:`` made of ``always()`` and
  ``steps.ID.outputs.K != ''`` terms, and skipping later steps after a failure unless their
  ``if`` says ``always()``. ``uses:`` steps (checkout) are the caller's job: the working
  directory is the checkout.
* :class:`GitLabJobRun`, GitLab CI's shell executor: ``before_script`` and ``script`` in one
  bash session under ``set -eo pipefail``, ``after_script`` in a new session, also when the
  script failed (with ``CI_JOB_STATUS``, within 5 minutes); the job's ``variables`` under the pipeline's
  (which win, as in GitLab) and the predefined ``CI_*`` variables the examples use.

A construct either runner does not know fails the test rather than being guessed at.
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

EXPR = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
OUTPUT_TERM = re.compile(r"^steps\.([a-z_-]+)\.outputs\.([a-z_-]+)\s*!=\s*''$")
# GitHub's `shell: bash`; without a shell it runs `bash -e {0}` (no pipefail).
GITHUB_SHELLS = {None: ["-e"], "bash": ["--noprofile", "--norc", "-eo", "pipefail"]}
# Job keys that change nothing when run here (where it runs, how long GitLab allows).
GITLAB_INERT = {"stage", "tags", "timeout"}
GITLAB_RUN = {"variables", "before_script", "script", "after_script"}
AFTER_SCRIPT_S = 300  # GitLab stops an after_script after 5 minutes


class WorkflowError(AssertionError):
    pass


@dataclass
class StepResult:
    name: str
    rc: int | None  # None: skipped
    stdout: str
    stderr: str


def run_bash(name: str, script: str, options: list[str], cwd: Path, env: dict[str, str],
             timeout_s: float) -> StepResult:
    """``bash OPTIONS -c SCRIPT``; at the deadline its whole process group is killed."""
    proc = subprocess.Popen(["bash", *options, "-c", script], cwd=cwd, env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # sbatch --wait, the CLI's wait: all of them
        out, err = proc.communicate()
        err += f"\n[test runner] killed after {timeout_s:.0f}s"
    return StepResult(name, proc.returncode, out, err)


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
        workflow: Any = YAML(typ="safe").load(self.path.read_text())
        spec = workflow["jobs"][self.job]
        default_shell = ((workflow.get("defaults") or {}).get("run") or {}).get("shell")
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
            shell = step.get("shell", default_shell)
            if shell not in GITHUB_SHELLS:
                raise WorkflowError(f"shell not supported by the test runner: {shell}")
            out_file = self.workdir / f".github_output_{n}"
            out_file.write_text("")
            env = {**self.env, **job_env, "GITHUB_OUTPUT": str(out_file),
                   "GITHUB_RUN_ID": "4711", "GITHUB_RUN_ATTEMPT": "1"}
            done = run_bash(name, self.expand(step["run"]), GITHUB_SHELLS[shell],
                            self.workdir, env, timeout_s)
            self.results.append(done)
            if "id" in step:
                self.outputs[step["id"]] = dict(
                    line.split("=", 1) for line in out_file.read_text().splitlines() if "=" in line)
            failed = failed or done.rc != 0
        return self.results


def _lines(spec: dict[str, Any], key: str) -> list[str]:
    lines = spec.get(key) or []
    if not all(isinstance(line, str) for line in lines):
        raise WorkflowError(f"{key}: only a list of strings is supported by the test runner")
    return lines


def _session(lines: list[str]) -> str:
    """The script the shell executor feeds bash: each command echoed, then run."""
    steps = [f"printf '%s\\n' {shlex.quote('$ ' + line)}\n{line}" for line in lines]
    return "set -eo pipefail\nset +o noclobber\n" + "\n".join(steps) + "\n"


@dataclass
class GitLabJobRun:
    path: Path
    job: str
    variables: dict[str, str]  # the project's and pipeline's CI/CD variables (they win)
    workdir: Path  # the checkout: CI_PROJECT_DIR
    env: dict[str, str]  # the process environment (PATH, PYTHONPATH, SLURM_CONF...)
    results: list[StepResult] = field(default_factory=list)

    def job_spec(self) -> dict[str, Any]:
        pipeline: Any = YAML(typ="safe").load(self.path.read_text())
        if unknown := set(pipeline) - {self.job, "stages"}:
            raise WorkflowError(f"top-level keys not supported by the test runner: {unknown}")
        spec: dict[str, Any] = pipeline[self.job]
        if unknown := set(spec) - GITLAB_INERT - GITLAB_RUN:  # rules, when, image, ...
            raise WorkflowError(f"job keys not supported by the test runner: {unknown}")
        if any("$" in str(v) for v in (spec.get("variables") or {}).values()):
            raise WorkflowError("variables that expand others are not supported by the runner")
        return spec

    def run(self, timeout_s: float) -> list[StepResult]:
        spec = self.job_spec()
        env = {**self.env, **{k: str(v) for k, v in (spec.get("variables") or {}).items()},
               **self.variables, "CI": "true", "GITLAB_CI": "true", "CI_JOB_NAME": self.job,
               "CI_PIPELINE_ID": "4711", "CI_JOB_ID": "90210",
               "CI_COMMIT_SHA": "0123456789abcdef0123456789abcdef01234567",
               "CI_COMMIT_SHORT_SHA": "01234567", "CI_PROJECT_DIR": str(self.workdir)}
        main = _lines(spec, "before_script") + _lines(spec, "script")
        done = run_bash("script", _session(main), ["--noprofile", "--norc"], self.workdir,
                        env, timeout_s)
        self.results.append(done)
        if after := _lines(spec, "after_script"):
            status = "success" if done.rc == 0 else "failed"
            self.results.append(run_bash("after_script", _session(after),
                                         ["--noprofile", "--norc"], self.workdir,
                                         {**env, "CI_JOB_STATUS": status},
                                         min(timeout_s, AFTER_SCRIPT_S)))
        return self.results


__all__ = ["GitLabJobRun", "StepResult", "WorkflowError", "WorkflowRun", "run_bash"]
