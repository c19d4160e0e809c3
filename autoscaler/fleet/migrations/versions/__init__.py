"""Schema revisions, oldest first by ``down_revision``; Alembic reads every other file here."""
