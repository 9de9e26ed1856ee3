"""A local, wire-true stand-in for the Agents API, for demos, tests and benchmarks."""
