"""The documentation site builds with `mkdocs build --strict`: a broken link or anchor, or a
page missing from mkdocs.yml's nav, fails it. Links written `/path` point into the
repository (GitHub resolves them from its root); each must name a file that exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
REPO_LINK = re.compile(r"\]\((/[^)#\s]+)(?:#[^)]*)?\)")


def test_the_site_builds_strictly(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(tmp_path / "site")],
        cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert build.returncode == 0, build.stdout + build.stderr
    assert (tmp_path / "site" / "reference" / "policy" / "index.html").exists()


def test_links_into_the_repository_name_files_that_exist():
    missing = [f"{page.relative_to(ROOT)}: {link}"
               for page in sorted(DOCS.rglob("*.md"))
               for link in REPO_LINK.findall(page.read_text())
               if not (ROOT / link.lstrip("/")).exists()]
    assert missing == []


def test_every_page_is_in_the_nav():
    # mkdocs warns about pages not in nav (validation.omitted_files), which --strict fails;
    # this says which, without a build.
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = [str(p.relative_to(DOCS)) for p in sorted(DOCS.rglob("*.md"))]
    assert [p for p in pages if f" {p}" not in nav] == []
