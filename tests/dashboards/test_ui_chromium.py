"""The status page in headless Chromium through the scenario: logged in with the form,
one screenshot per phase, each showing what that phase did to the fleet."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow
PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def shots(scenario):
    if scenario.shots is None:
        pytest.fail("chromium is not installed (Debian package chromium; scripts/install.sh)")
    return scenario.shots


def test_the_browser_logs_in_with_the_form_and_never_sees_the_token(shots):
    from tests.dashboards.scenario import TOKEN

    assert "needs the service's API token" in shots.login_text
    assert all(TOKEN not in text for text in shots.texts.values())


def test_a_screenshot_per_phase_shows_the_demo_fleet(shots):
    assert list(shots.shots) == ["scale-up", "trouble", "observer", "interruptions", "blind",
                                 "stopped"]
    for path in shots.shots.values():
        data = path.read_bytes()
        assert data.startswith(PNG) and len(data) > 20_000, path
    up = shots.texts["scale-up"]
    assert "vision-train-1" in up and "search-infer-3" in up and "READY" in up
    assert "quota" in up  # the held job: the team is at its GPU quota
    assert "bogus_key" in up  # a broken policy file, shown in every phase
    assert "GPU autoscaler: fleet & money" in up  # dashboard links
    trouble = shots.texts["trouble"]
    assert "with an XID error" in trouble and "draining and replacing" in trouble, trouble
    assert "READY nodes look broken" in shots.texts["observer"]  # the held replacements
    assert "interrupted node drained" in shots.texts["interruptions"]
    blind = shots.texts["blind"]
    assert "slurm could not be read" in blind and "scale-down frozen" in blind
    assert "Sources unreadable: slurm" in blind
