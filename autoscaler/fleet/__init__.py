"""The fleet: node lifecycle (one transition table) and the SQLAlchemy store."""
