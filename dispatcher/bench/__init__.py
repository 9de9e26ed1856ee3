"""``toolfan bench``: how fast toolfan is, what a call costs, next to what users pick instead.

One run starts its own stack (a Redis, the emulator, workers, a poller), runs each workload
through toolfan and through three baselines with the same worker settings (raw Celery
chords, a sequential in-process loop, an in-process thread pool), polls 10,000 idle
sessions, measures the p95 at half of peak load, and checks the issue's targets.

Modules: ``config`` (options), ``tools`` (the bench tools and raw Celery tasks, imported by
workers), ``stack`` (processes), ``emu`` (the emulator's admin routes), ``measure`` (CPU,
Redis commands, percentiles), ``figures`` (one measurement), ``engine`` (toolfan and raw
Celery runs), ``inprocess`` (the loop and thread-pool baselines), ``phases`` (idle polling,
half load), ``report`` (table, targets, JSON), ``plot`` (PNG), ``run`` (the whole run).
This module imports nothing, so a worker importing ``dispatcher.bench.tools`` pays for
nothing else.
"""
