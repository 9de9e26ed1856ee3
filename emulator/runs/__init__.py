"""The run-shaped Assistants protocol: threads and runs, served in three flavours.

One run store (``emulator.runs.store``) is reachable through the OpenAI paths (``/v1``),
the Azure OpenAI ones (``/openai``) and the Azure AI Foundry Agent Service ones
(``/api/projects/{project}``); see ``emulator.runs.routes`` and ``emulator/README.md``.
A run is scripted as phases of function calls (``emulator.runs.calls``) that it asks for
one ``requires_action`` at a time (``emulator.runs.model``).
"""
