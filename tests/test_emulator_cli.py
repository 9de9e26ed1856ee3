"""``toolfan emulator`` serves the API on the given port until stopped."""

import os

import httpx

from dispatcher.devstack import Service, free_port


def test_toolfan_emulator_serves_until_stopped(tmp_path):
    port = free_port()
    service = Service(["emulator", "--port", str(port)], tmp_path / "emulator.log", os.environ)
    try:
        service.wait_for_output(f"listening on http://127.0.0.1:{port}/v1", 30)
        headers = {"Authorization": "Bearer k", "OpenAI-Beta": "agents=v1"}
        page = httpx.get(f"http://127.0.0.1:{port}/v1/agents/sessions", headers=headers)
        assert page.status_code == 200
        assert page.json()["object"] == "list"
        assert httpx.get(f"http://127.0.0.1:{port}/v1/agents/sessions").status_code == 401
    finally:
        service.stop()
    assert service.proc.returncode is not None
