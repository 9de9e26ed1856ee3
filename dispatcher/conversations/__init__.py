"""The durable tool loop: a model step, one chord of its tool calls, the next model step.

An application that drives Chat Completions or Responses runs this loop in its own
process; here it runs on the fleet, and every model answer and every tool result is saved
before the next step starts, so a crash anywhere resumes from the last saved step and no
model call or function call is repeated. :mod:`toolfan.conversations` is its public face.
"""
