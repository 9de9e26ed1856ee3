"""The bench (``make bench``, ``python -m bench``): how fast toolfan is, what a call costs.

One run starts its own stack (a Redis, the emulator, default ``toolfan worker`` processes,
``toolfan poll``), runs each workload through toolfan and through three baselines on the
same workers (raw Celery chords, a sequential in-process loop, an in-process thread pool),
each throughput ``--reps`` times, polls idle sessions, measures the p95 at half of peak
load, polled and pushed, and checks the targets. It lives outside the product's packages:
not in the wheel, and imported by no toolfan command.

Modules: ``config`` (options), ``tools`` (the bench tools and raw Celery tasks, imported by
workers), ``stack`` (processes), ``emu`` (the emulator's admin routes), ``measure`` (CPU,
Redis commands, percentiles), ``figures`` (one measurement), ``engine`` (toolfan and raw
Celery runs), ``assistants`` (the no-op workload as watched runs of the ``assistants``
source, on the same workers), ``inline`` (``toolfan.run_tool_calls``: throughput, latency on
a warm fleet),
``inprocess`` (the loop and thread-pool baselines), ``phases`` (idle polling,
half load), ``report`` (table, targets, JSON), ``plot`` (PNG), ``run`` (the whole run),
``curves`` and ``curves_plot`` (``python -m bench curves``: cost curves against raw Celery),
``soak``, ``soak_load``, ``soak_runs``, ``soak_inline``, ``soak_mix``, ``soak_sample`` and
``soak_report`` (``python -m bench soak``: a long load of sessions, watched runs and
``run_tool_calls`` batches with faults on; memory, keys, pub/sub, connections and p95 over
time).
This module imports nothing, so a worker importing ``bench.tools`` pays for
nothing else.
"""
