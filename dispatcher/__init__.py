"""The remote side of toolfan: API client, sources of pending work, poller, CLI."""
