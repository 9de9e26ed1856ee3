"""The webhook intake: pushed ``agent.session.action_required`` events, verified and dispatched.

Polling lists every session every pass and answers a session a pass late; the platform can
push instead. ``toolfan webhook`` serves the intake (:mod:`dispatcher.webhook.app`): each
delivery is verified before anything else is read (:mod:`dispatcher.webhook.verify`),
deduplicated by its ``webhook-id``, and answered within milliseconds; the session it names
is retrieved and dispatched by a task on ``toolfan.poll`` (:mod:`dispatcher.webhook.push`),
through the same claims, ledger and chords as a poll, which stays on as the safety net.
"""
