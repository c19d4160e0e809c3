"""Everything read from the world each tick, turned into one immutable Snapshot."""
