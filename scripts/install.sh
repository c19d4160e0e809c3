#!/usr/bin/env bash
# Installs everything gpu-autoscaler's demo and tests need on a fresh Debian 12 machine:
# the system services the tests start themselves (Prometheus, Slurm, munge, sshd,
# PostgreSQL binaries), the Python package with its test extra, and the sandbox's node
# image (minimal Debian 12 built with mmdebstrap, booted per node with systemd-nspawn;
# ~300 MB in ~/.cache/gpu-autoscaler). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."
# A step that fails stops the script: what runs beside it is stopped too.
trap 'jobs -p | xargs -r kill 2>/dev/null || true' EXIT

# Terraform and the AWS provider come with the image; nothing can download them here.
if ! command -v terraform >/dev/null; then
  echo "error: terraform is not on PATH (expected /usr/local/bin/terraform, 1.x)" >&2; exit 1
fi
if ! ls -d /opt/tf-plugins/registry.terraform.io/hashicorp/aws/5.* >/dev/null 2>&1; then
  echo "error: the hashicorp/aws 5.x provider is not in the filesystem mirror /opt/tf-plugins" >&2
  exit 1
fi
# kubectl (the contract tests run it against the project's own API server) comes with the
# image too: Debian 12 does not package it.
if ! command -v kubectl >/dev/null; then
  echo "error: kubectl is not on PATH (expected /usr/bin/kubectl, 1.2x or newer)" >&2; exit 1
fi

# Installed, not merely known to dpkg: a removed package whose config files remain
# ("rc") still answers `dpkg -s`.
installed() { [ "$(dpkg-query -W -f='${Status}' "$1" 2>/dev/null)" = "install ok installed" ]; }
need_apt=()
# chromium: the headless tests of /ui (issue 20).
for pkg in prometheus slurmctld slurmd munge openssh-server iproute2 postgresql mmdebstrap \
    systemd-container chromium; do
  installed "$pkg" || need_apt+=("$pkg")
done

# The Python package needs nothing from apt: it installs while apt does (two cores, and
# each of the two is mostly waiting on one of them).
pip_log=$(mktemp)
python3 -m pip install -q --disable-pip-version-check -e '.[test]' >"$pip_log" 2>&1 &
pip_pid=$!
if ((${#need_apt[@]})); then
  echo "installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  # force-unsafe-io: no fsync per unpacked file (a crash mid-install is re-run anyway).
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    -o Dpkg::Options::=--force-unsafe-io "${need_apt[@]}" >/dev/null
fi
if ! wait "$pip_pid"; then
  cat "$pip_log" >&2; echo "error: pip install -e '.[test]' failed" >&2; exit 1
fi
grep -v "is ignored: it is neither a file nor a directory" "$pip_log" || true
rm -f "$pip_log"

# pyenv only sees a new console script after a rehash; `python -m pip` does not trigger one.
if command -v pyenv >/dev/null; then pyenv rehash; fi
# Built once, reused while its package list is unchanged (as root: nodes need root anyway).
# The two are independent and each mostly single-threaded: built side by side.
if [ "$(id -u)" -eq 0 ]; then
  wheel_log=$(mktemp)
  # The service's dependencies as wheels, for the controller host test (hosts have no network).
  python3 -m autoscaler.sandbox.hosts.wheelhouse >"$wheel_log" 2>&1 &
  wheel_pid=$!
  image=$(python3 -m autoscaler.sandbox.hosts.node_image)
  echo "node image: $image"
  if ! wait "$wheel_pid"; then
    cat "$wheel_log" >&2; echo "error: building the wheelhouse failed" >&2; exit 1
  fi
  echo "wheelhouse: $(tail -n 1 "$wheel_log")"
  rm -f "$wheel_log"
else
  echo "note: the sandbox's node image is built on the first run as root"
fi
if ! command -v gpu-autoscaler >/dev/null; then
  echo "warning: gpu-autoscaler is not on PATH; run it as: python3 -m autoscaler.cli" >&2
else
  echo "gpu-autoscaler installed: $(command -v gpu-autoscaler)"
fi
