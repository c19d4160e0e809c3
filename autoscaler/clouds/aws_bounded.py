"""A botocore client whose every API call, and every page of a paginated one, ends within a
limit (``autoscaler/bounded.py``): botocore's read_timeout bounds each socket read only, so
an endpoint that trickles its answer would hold the tick, the reconciler or the notice poll
for ever. A paginated listing is bounded per page call, never as a whole: a fleet of many
pages is still read."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from autoscaler.bounded import Bound


class BoundedClient:
    """Wraps a botocore client: its operations (``describe_instances(...)``) run within
    ``limit`` seconds each, keyed by ``key`` (the service): while one that overran still
    runs, the next fails at once with :class:`autoscaler.bounded.Overran`. Everything else
    (``meta``, ``exceptions``) is the client's own. Paginate with :meth:`pages`, not with
    ``get_paginator``, whose calls are not bounded."""

    def __init__(self, client: Any, bound: Bound, key: str, limit: float):
        self.raw, self.bound, self.key, self.limit = client, bound, key, limit

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.raw, name)
        if name not in self.raw.meta.method_to_api_mapping:
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self.bound.call(self.key, self.limit, lambda: attr(*args, **kwargs),
                                   f"{self.key} {name}")
        return call

    def pages(self, operation: str, **kwargs: Any) -> Iterator[dict[str, Any]]:
        """The pages of ``operation``, each page's call within ``limit``."""
        pages = iter(self.raw.get_paginator(operation).paginate(**kwargs))
        while True:
            page = self.bound.call(self.key, self.limit, lambda: next(pages, None),
                                   f"{self.key} {operation}")
            if page is None:
                return
            yield page
