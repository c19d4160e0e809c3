#!/usr/bin/env bash
# Installs everything gpu-autoscaler's demo and tests need on a fresh Debian 12 machine:
# the system services the tests start themselves (Prometheus, Slurm, munge, sshd,
# PostgreSQL binaries), the Python package with its test extra, and the sandbox's node
# image (minimal Debian 12 built with mmdebstrap, booted per node with systemd-nspawn;
# ~300 MB in ~/.cache/gpu-autoscaler). Safe to re-run.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
for pkg in prometheus slurmctld slurmd munge openssh-server iproute2 postgresql mmdebstrap systemd-container; do
  dpkg -s "$pkg" >/dev/null 2>&1 || need_apt+=("$pkg")
done
dpkg -s chromium >/dev/null 2>&1 || need_apt+=(chromium)  # headless tests of /ui (issue 20)
if ((${#need_apt[@]})); then
  echo "installing system packages: ${need_apt[*]}"
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

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

python3 -m pip install -q --disable-pip-version-check -e '.[test]'
# pyenv only sees a new console script after a rehash; `python -m pip` does not trigger one.
if command -v pyenv >/dev/null; then pyenv rehash; fi
# Built once, reused while its package list is unchanged (as root: nodes need root anyway).
if [ "$(id -u)" -eq 0 ]; then
  image=$(python3 -m autoscaler.sandbox.hosts.node_image)
  echo "node image: $image"
  # The service's dependencies as wheels, for the controller host test (hosts have no network).
  wheelhouse=$(python3 -m autoscaler.sandbox.hosts.wheelhouse)
  echo "wheelhouse: $wheelhouse"
else
  echo "note: the sandbox's node image is built on the first run as root"
fi
if ! command -v gpu-autoscaler >/dev/null; then
  echo "warning: gpu-autoscaler is not on PATH; run it as: python3 -m autoscaler.cli" >&2
else
  echo "gpu-autoscaler installed: $(command -v gpu-autoscaler)"
fi
