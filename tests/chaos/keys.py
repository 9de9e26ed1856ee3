"""Redis keys shared by the chaos tools (in the workers) and the runner.

Kept apart from ``tools.py`` so the runner can read them without registering the chaos
tools in its own process (under pytest, that registry is the rest of the suite's).
"""

#: Prefix of the per-call side-effect counters.
RUNS_PREFIX = "chaos:runs:"
#: Set of the pids of pool processes running a chaos tool right now, so kills can aim.
BUSY = "chaos:busy"
