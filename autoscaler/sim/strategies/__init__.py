"""Strategies replayed by the simulator: ours (the engine), static, ca_like, target_tracking,
and the oracle lower bound (computed, not replayed)."""
