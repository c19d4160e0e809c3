"""Shared test configuration. Fixtures that start real services live next to their tests."""
