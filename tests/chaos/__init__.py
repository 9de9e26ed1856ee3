"""The chaos run: hundreds of sessions answered while workers die and the API misbehaves.

``python -m tests.chaos.run`` is the full run; ``test_chaos.py`` runs a CI-sized one.
"""
