"""The sources: one module per protocol, each with its own client, discovery and delivery.

The engine finds them through :mod:`tasks.sources` (the ``toolfan.sources`` entry points),
never by importing them.
"""
