"""The store's schema history (Alembic): ``versions/`` holds one revision per schema change,
``env.py`` runs them on the connection that ``fleet/schema.py`` hands over."""
