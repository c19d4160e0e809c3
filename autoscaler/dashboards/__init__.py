"""Grafana dashboards, Prometheus alert rules and their provisioning, generated as code.

``panels`` and ``alerts`` are plain data; only ``render`` imports grafana-foundation-sdk (the
``dashboards`` extra), so the service never loads it.
"""
