"""The shared vocabulary: the engine's input (snapshot records, the fleet view, capacity
requests) and output (the plan and its actions), node states, pool references and the clock.

A leaf: it imports only ``policy`` and ``catalog``, so every other package can use it
without loading the engine, the store or a cloud client.
"""
