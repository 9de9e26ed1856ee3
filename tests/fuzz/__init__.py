"""The fuzz campaign: hostile ids, arguments, names and outputs through the real path.

``python -m tests.fuzz --sessions N`` is the full run; ``test_fuzz.py`` runs a CI-sized one.
"""
