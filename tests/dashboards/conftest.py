"""One scenario run for the package: the PromQL checks and the Chromium checks share it."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.dashboards.chromium import Chromium, chromium_path
from tests.dashboards.scenario import TOKEN, Scenario

SHOTS_ENV = "GPU_AUTOSCALER_UI_SHOTS"  # also copy the screenshots there (docs/ for the README)


@dataclass
class UiShots:
    """At each phase: the status page in Chromium, logged in through the form once."""

    workdir: Path
    browser: Chromium | None = None
    shots: dict[str, Path] = field(default_factory=dict)
    texts: dict[str, str] = field(default_factory=dict)
    login_text: str = ""

    def open(self, scenario: Scenario) -> None:
        """Start the browser and sign in (before the run: ticks must not wait for it)."""
        self.browser = Chromium(self.workdir)
        self.browser.goto(f"{scenario.url}/ui")
        self.login_text = self.browser.text()
        self.browser.type_into("#token", TOKEN)

    def __call__(self, phase: str, scenario: Scenario) -> None:
        if self.browser is None:
            raise RuntimeError("UiShots.open() first")
        self.browser.goto(f"{scenario.url}/ui")
        self.texts[phase] = self.browser.text()
        path = self.browser.screenshot(self.workdir / f"{len(self.shots) + 1}-{phase}.png")
        self.shots[phase] = path
        out = os.environ.get(SHOTS_ENV)
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            shutil.copy(path, Path(out) / f"ui-{phase}.png")

    def close(self) -> None:
        if self.browser is not None:
            self.browser.stop()


@pytest.fixture(scope="package")
def scenario(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("scenario")
    # Without Chromium the PromQL checks still run; the Chromium test then fails saying so.
    shots = UiShots(workdir) if chromium_path() is not None else None
    s = Scenario(workdir, on_phase=shots)
    s.shots = shots  # type: ignore[attr-defined]
    try:
        s.start()  # inside: a start that fails half way stops what it started
        if shots is not None:
            shots.open(s)
        s.run()
        yield s
    finally:
        if shots is not None:
            shots.close()
        s.stop()
