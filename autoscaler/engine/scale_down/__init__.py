"""Ways a node leaves a pool, one module each, tried in a fixed order.

Each module exposes ``candidates(ctx, prices, now, budget) -> list[Action]`` and spends
the shared :class:`Budget`, so together they never drain more than the pool allows.
"""
