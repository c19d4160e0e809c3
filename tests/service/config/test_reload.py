"""Hot reload: changed files re-read, broken files keep the last good policy."""

from __future__ import annotations

import os

import pytest

from autoscaler.catalog import default_catalog
from autoscaler.service.config import reload as reload_mod
from autoscaler.service.config.reload import PolicyReloader
from tests.service.service_fakes import write_policy


@pytest.fixture
def pdir(tmp_path):
    d = tmp_path / "policies"
    write_policy(d, "vision", name="train", max_nodes=4)
    write_policy(d, "search", name="infer", max_nodes=2)
    return d


def touch_later(path):
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_first_refresh_loads_every_team(pdir):
    r = PolicyReloader(pdir, default_catalog())
    result = r.refresh()
    assert result.added == ["search", "vision"] and result.errors == []
    assert r.policies["vision"].pools[0].max_nodes == 4 and r.generation == 1


def test_an_unchanged_directory_is_not_parsed_again(pdir, monkeypatch):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    calls = []
    monkeypatch.setattr(reload_mod, "load_file", lambda *a: calls.append(a) or (None, []))
    result = r.refresh()
    assert not result.changed and calls == []
    touch_later(pdir / "vision.yaml")  # same content, new mtime: hashed, not parsed
    assert not r.refresh().changed and calls == []


def test_a_changed_file_is_reloaded(pdir):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    path = pdir / "vision.yaml"
    path.write_text(path.read_text().replace("max_nodes: 4", "max_nodes: 6"))
    touch_later(path)
    result = r.refresh()
    assert result.updated == ["vision"] and r.policies["vision"].pools[0].max_nodes == 6


def test_reread_sees_a_change_that_kept_mtime_and_size(pdir):
    # What SIGHUP (systemctl reload) is for: a file copied over with its old mtime.
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    path = pdir / "vision.yaml"
    st = path.stat()
    path.write_text(path.read_text().replace("max_nodes: 4", "max_nodes: 6"))
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not r.refresh().changed and r.policies["vision"].pools[0].max_nodes == 4
    r.reread()
    result = r.refresh()
    assert result.updated == ["vision"] and r.policies["vision"].pools[0].max_nodes == 6
    assert not r.refresh().changed  # once per request


def test_a_broken_file_keeps_the_last_good_policy_until_fixed(pdir, caplog):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    path = pdir / "vision.yaml"
    good = path.read_text()
    path.write_text(good.replace("max_nodes: 4", "max_nodes: four"))
    touch_later(path)
    result = r.refresh()
    assert not result.changed and r.policies["vision"].pools[0].max_nodes == 4
    assert len(result.errors) == 1
    err = result.errors[0]
    assert err.file == str(path) and err.line > 1 and "max_nodes" in err.path
    assert "keeps its last good policy" in caplog.text and str(path) in caplog.text
    path.write_text(good.replace("max_nodes: 4", "max_nodes: 5"))
    touch_later(path)
    result = r.refresh()
    assert result.errors == [] and r.policies["vision"].pools[0].max_nodes == 5


def test_a_loader_that_raises_costs_only_that_team_its_update(pdir, monkeypatch, caplog):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    real = reload_mod.load_file

    def crashing(path, catalog):
        if path.name == "vision.yaml":
            raise RecursionError("maximum recursion depth exceeded")
        return real(path, catalog)

    monkeypatch.setattr(reload_mod, "load_file", crashing)
    for name in ("vision.yaml", "search.yaml"):
        path = pdir / name
        path.write_text(path.read_text().replace("max_nodes: ", "max_nodes: 1"))
        touch_later(path)
    result = r.refresh()
    assert result.updated == ["search"] and r.policies["search"].pools[0].max_nodes == 12
    assert r.policies["vision"].pools[0].max_nodes == 4  # its last good policy
    (err,) = result.errors
    assert err.file == str(pdir / "vision.yaml") and "RecursionError" in err.message
    assert "keeps its last good policy" in caplog.text


def test_removed_files_remove_their_team_and_new_broken_files_add_nothing(pdir):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    (pdir / "search.yaml").unlink()
    (pdir / "new.yaml").write_text("team: [oops\n")
    result = r.refresh()
    assert result.removed == ["search"] and sorted(r.policies) == ["vision"]
    assert [e.file for e in result.errors] == [str(pdir / "new.yaml")]


def test_a_team_defined_twice_keeps_the_first_file(pdir):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    dup = pdir / "zz-vision-copy.yaml"
    dup.write_text((pdir / "vision.yaml").read_text().replace("max_nodes: 4", "max_nodes: 8"))
    result = r.refresh()
    assert r.policies["vision"].pools[0].max_nodes == 4
    assert any("already defined" in e.message and e.file == str(dup) for e in result.errors)
    dup.unlink()
    assert r.refresh().errors == []


def test_a_missing_directory_keeps_everything(tmp_path, pdir):
    r = PolicyReloader(pdir, default_catalog())
    r.refresh()
    pdir.rename(tmp_path / "elsewhere")
    result = r.refresh()
    assert sorted(r.policies) == ["search", "vision"]
    assert "does not exist" in result.errors[0].message
