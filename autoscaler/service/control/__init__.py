"""The service's three loops (the tick, spot notices, capacity requests) and what a tick
runs besides deciding: the reconciler, launch back-offs, the preview, the leader lease."""
