"""The long-running service: tick loop, executor, reconciler, leader lease, HTTP API, reload."""
