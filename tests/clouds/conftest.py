"""Fixtures for the cloud adapter tests (defined in helpers so other test packages share them)."""

from tests.clouds.helpers import answers, ecs, moto, moto_url, score_book, spot_book

__all__ = ["answers", "ecs", "moto", "moto_url", "score_book", "spot_book"]
