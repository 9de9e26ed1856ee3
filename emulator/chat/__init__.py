"""Chat Completions and Responses, answered by a deterministic scripted model.

The model is stateless: what it answers depends only on the request (and, for Responses,
on the ``previous_response_id`` chain it names). A script (``emulator.chat.script``) is a
list of steps; the k-th model call of a conversation, k counted from the model turns the
request shows, gets step k (``emulator.chat.model``). Requests are validated the way the
real API validates them (``chat_request``, ``responses_request``), so a client that
mis-threads tool results is refused here as it would be there. Served for OpenAI and Azure
OpenAI (``emulator.chat.surfaces``, ``emulator.chat.routes``), scripted and read back
through ``/_emulator/chat`` (``emulator.chat.admin``) or ``EmulatorState.chat``.
"""
