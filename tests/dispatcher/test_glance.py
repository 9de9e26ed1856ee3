"""``glance``: the ids of a listed session, only when they say all there is to know."""

import pytest

from dispatcher.models import Glanced, glance


def call(turn="t1", call_id="c1", **extra):
    return {"type": "function_call", "turn_id": turn, "call_id": call_id, "name": "f", **extra}


def test_a_session_of_well_formed_calls_is_glanced_with_its_ids_in_order():
    raw = {"id": "s\udc80 1", "required_actions": [call("t", "b"), call("t", "a")]}
    glanced = glance(raw)
    assert glanced == Glanced("s\udc80 1", (("t", "b"), ("t", "a")), raw)


@pytest.mark.parametrize(
    "raw",
    [
        None,
        [],
        "session",
        {"required_actions": [call()]},
        {"id": "", "required_actions": [call()]},
        {"id": 7, "required_actions": [call()]},
        {"id": "s"},
        {"id": "s", "required_actions": []},
        {"id": "s", "required_actions": {"0": call()}},
        {"id": "s", "required_actions": [call(), {"type": "mcp_approval", "id": "a"}]},
        {"id": "s", "required_actions": [call(), "call"]},
        {"id": "s", "required_actions": [call(turn="")]},
        {"id": "s", "required_actions": [call(call_id=None)]},
        {"id": "s", "required_actions": [call(call_id=["c1"])]},
        {"id": "s", "required_actions": [call(), call()]},
    ],
)
def test_anything_else_is_left_to_the_full_read(raw):
    assert glance(raw) is None
