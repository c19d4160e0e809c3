"""The local CI runners behave as GitHub's and GitLab's do where the examples rely on it
(real bash, toy pipelines); the examples themselves run in ``test_requests_e2e.py``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoscaler.sandbox.hosts.procs import pid_alive, wait_until
from tests.e2e.workflow_runner import GitLabJobRun, WorkflowError, WorkflowRun

GITLAB = """\
job:
  stage: test
  variables: {SHAPE: job, KEPT: job}
  before_script:
    - echo "before $SHAPE" > log
  script:
    - echo "script $KEPT $CI_PIPELINE_ID" >> log
    - X=$(false | cat)
    - echo never >> log
  after_script:
    - echo "after $CI_JOB_STATUS $X" >> log
"""


def gitlab(tmp_path: Path, text: str) -> GitLabJobRun:
    (tmp_path / ".gitlab-ci.yml").write_text(text)
    return GitLabJobRun(tmp_path / ".gitlab-ci.yml", "job", {"SHAPE": "pipeline"}, tmp_path,
                        dict(os.environ))


def test_gitlab_after_script_runs_in_a_new_session_after_a_failed_pipe(tmp_path: Path) -> None:
    results = gitlab(tmp_path, GITLAB).run(30)
    assert [(r.name, r.rc) for r in results] == [("script", 1), ("after_script", 0)]
    # pipefail stopped the script; the pipeline's variable won over the job's.
    assert (tmp_path / "log").read_text().splitlines() == [
        "before pipeline", "script job 4711", "after failed "]
    assert "$ X=$(false | cat)" in results[0].stdout  # each command echoed, as in the job log


@pytest.mark.parametrize("extra", ["  rules: [{when: always}]\n", "  image: python:3.12\n"])
def test_gitlab_keys_it_does_not_model_fail_the_test(tmp_path: Path, extra: str) -> None:
    with pytest.raises(WorkflowError, match="not supported"):
        gitlab(tmp_path, GITLAB + extra).run(30)


def test_github_shell_bash_has_pipefail_and_always_runs_the_cleanup(tmp_path: Path) -> None:
    (tmp_path / "wf.yml").write_text("""\
defaults: {run: {shell: bash}}
jobs:
  j:
    steps:
      - {id: a, run: 'v=$(false | cat); echo "v=$v" >> "$GITHUB_OUTPUT"'}
      - {run: echo skipped}
      - {if: always(), run: echo cleanup}
""")
    run = WorkflowRun(tmp_path / "wf.yml", "j", {}, tmp_path, dict(os.environ))
    assert [r.rc for r in run.run(30)] == [1, None, 0]
    assert run.results[2].stdout == "cleanup\n"


def test_a_step_past_its_deadline_is_killed_with_its_children(tmp_path: Path) -> None:
    results = gitlab(tmp_path, "job:\n  script:\n    - sleep 60 & echo $! > pid; wait\n").run(1)
    assert results[0].rc != 0 and "killed after 1s" in results[0].stderr
    pid = int((tmp_path / "pid").read_text())
    # The backgrounded sleep went with the group (SIGKILL is asynchronous: a bounded wait).
    wait_until(lambda: not pid_alive(pid), 10, f"the backgrounded sleep {pid} to die")
