"""Wheels to install gpu-autoscaler on a sandbox host, which has no network.

A controller host is installed from a release wheel and its dependencies, as an operator
without a package index does (``playbooks/controller.yml``, ``controller_wheelhouse_archive``).
The sandbox's hosts reach 169.254.77.0/24 only, so the dependencies are downloaded (and the
few published only as source built) once, by ``scripts/install.sh``, into the user's cache
under a name keyed by a hash of pyproject.toml's runtime dependencies and build requirements.
The project's own wheel is then built from the checkout without the network
(:func:`build_wheel`), with the build requirements taken from the same cache.

``python -m autoscaler.sandbox.hosts.wheelhouse`` fills the cache and prints its path.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path

from autoscaler.sandbox.hosts.node_image import cache_dir as images_dir

REPO = Path(__file__).resolve().parents[3]
PIP_TIMEOUT_S = 900.0
READY = "ready"  # written last: a cut-short download is not mistaken for a whole one


class WheelhouseError(RuntimeError):
    pass


def _project() -> dict[str, object]:
    pyproject = REPO / "pyproject.toml"
    if not pyproject.is_file():
        raise WheelhouseError(f"{pyproject} not found: the wheelhouse is built from a checkout")
    return tomllib.loads(pyproject.read_text())


def requirements() -> tuple[list[str], list[str]]:
    """(runtime dependencies, build requirements) as pyproject.toml lists them."""
    data = _project()
    project, build = data["project"], data["build-system"]
    assert isinstance(project, dict) and isinstance(build, dict)
    return list(project["dependencies"]), list(build["requires"])


def path() -> Path:
    runtime, build = requirements()
    tag = f"{sys.implementation.cache_tag}-{platform.machine()}"
    digest = hashlib.sha256("\n".join([tag, *runtime, "--", *build]).encode()).hexdigest()[:16]
    return images_dir().parent / f"wheelhouse-{digest}"


def _pip(*args: str) -> None:
    argv = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q", *args]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise WheelhouseError(f"pip {args[0]} took over {PIP_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise WheelhouseError(f"pip {args[0]} failed (exit {done.returncode}):\n{tail}")


def ensure() -> Path:
    """The wheelhouse (``runtime/`` and ``build/`` directories of wheels), downloaded if it
    is not in the cache yet: this needs the network, which scripts/install.sh has."""
    target = path()
    if (target / READY).is_file():
        return target
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    runtime, build = requirements()
    try:
        _pip("wheel", "--prefer-binary", "-w", str(partial / "runtime"), *runtime)
        _pip("wheel", "--prefer-binary", "-w", str(partial / "build"), *build)
        (partial / READY).write_text("\n".join(runtime + build) + "\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return target


def cached() -> Path:
    """The wheelhouse scripts/install.sh downloaded; a test cannot download it."""
    target = path()
    if not (target / READY).is_file():
        raise WheelhouseError(f"no wheelhouse at {target}: run scripts/install.sh (it downloads "
                              "the service's dependencies once)")
    return target


def build_wheel(out: Path) -> Path:
    """gpu-autoscaler's wheel built from the checkout as a release is (``python -m build``:
    the sdist, then the wheel from that sdist, so a file the sdist misses fails here; the
    version from git), offline: the isolated build environment gets its requirements from
    the wheelhouse."""
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(cached() / "build"),
           "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    argv = [sys.executable, "-m", "build", "--outdir", str(out), str(REPO)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, env=env)
    except subprocess.TimeoutExpired as exc:
        raise WheelhouseError(f"python -m build took over {PIP_TIMEOUT_S:.0f} s") from exc
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).strip().splitlines()[-15:])
        raise WheelhouseError(f"python -m build failed (exit {done.returncode}):\n{tail}")
    wheels = sorted(out.glob("gpu_autoscaler-*.whl"))
    if len(wheels) != 1 or len(list(out.glob("gpu_autoscaler-*.tar.gz"))) != 1:
        raise WheelhouseError(f"expected one gpu_autoscaler wheel and sdist in {out}: "
                              f"{sorted(p.name for p in out.iterdir())}")
    return wheels[0]


def archive(out: Path) -> Path:
    """The runtime wheels as one uncompressed tar (wheels are compressed already): one
    transfer to a host instead of one per wheel."""
    source = cached() / "runtime"
    with tarfile.open(out, "w") as tar:
        for wheel in sorted(source.glob("*.whl")):
            tar.add(wheel, arcname=wheel.name)
    return out


if __name__ == "__main__":
    try:
        print(ensure())
    except WheelhouseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(1)
