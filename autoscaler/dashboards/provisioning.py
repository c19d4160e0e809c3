"""The Grafana provisioning file that loads the committed dashboards from a directory."""

from __future__ import annotations

from pathlib import Path

# Where the committed JSON lives in a checkout (an editable install keeps this layout).
REPO_DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"
GRAFANA_PATH = Path("/var/lib/grafana/dashboards/gpu-autoscaler")


def provisioning_yaml(path: Path = GRAFANA_PATH) -> str:
    """A dashboards provider for Grafana's ``provisioning/dashboards/`` directory."""
    return (
        "# Grafana dashboard provisioning for gpu-autoscaler: copy dashboards/*.json to the\n"
        "# path below and this file to /etc/grafana/provisioning/dashboards/gpu-autoscaler.yaml.\n"
        "# The dashboards ask for a Prometheus datasource (variable ${datasource}).\n"
        "apiVersion: 1\n"
        "providers:\n"
        "  - name: gpu-autoscaler\n"
        "    folder: GPU autoscaler\n"
        "    type: file\n"
        "    disableDeletion: false\n"
        "    allowUiUpdates: false\n"
        "    updateIntervalSeconds: 60\n"
        "    options:\n"
        f"      path: {path}\n"
    )
