"""The functions an agent (or a run) declares, read off its ``tools`` as the API lists them.

A fleet serves many agents from one registry, so a model can name a registered function
its own agent was never given (a prompt injection naming another agent's ``delete_user``).
Where the API lists the agent's tools, the engine refuses such calls
(:class:`tasks.dispatch.Batch` ``declared``, ``TOOLFAN_ENFORCE_AGENT_TOOLS``).
"""

from __future__ import annotations

from typing import Any

#: Tool entries read at most (an agent has at most 128 tools; a hostile answer may not).
MAX_TOOLS = 1_000


def declared_functions(tools: Any) -> frozenset[str] | None:
    """The function names in a ``tools`` list; None when it lists nothing to go by.

    Both forms count: the flat one (``{"type": "function", "name": ...}``, sessions) and
    the nested one (``{"type": "function", "function": {"name": ...}}``, runs). An empty
    or missing list says nothing (the API may leave it out), so nothing is refused then;
    a list of other tools only declares no function at all.
    """
    if not isinstance(tools, list) or not tools:
        return None
    names: set[str] = set()
    for entry in tools[:MAX_TOOLS]:
        if not isinstance(entry, dict) or entry.get("type") != "function":
            continue
        nested = entry.get("function")
        name = nested.get("name") if isinstance(nested, dict) else entry.get("name")
        if isinstance(name, str) and name:
            names.add(name)
    return frozenset(names)
