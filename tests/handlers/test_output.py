from datetime import UTC, datetime

import pytest
from pydantic import BaseModel

from handlers.output import OutputError, serialize, truncate
from handlers.result import InputImage, InputText


class Point(BaseModel):
    x: int
    y: int


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plain text", "plain text"),
        ({"a": 1, "b": [1, 2]}, '{"a":1,"b":[1,2]}'),
        ([1, "two"], '[1,"two"]'),
        (42, "42"),
        (1.5, "1.5"),
        (True, "true"),
        (None, "null"),
        (Point(x=1, y=2), '{"x":1,"y":2}'),
        ({"when": datetime(2030, 1, 2, tzinfo=UTC)}, '{"when":"2030-01-02T00:00:00Z"}'),
        ({"p": Point(x=0, y=0)}, '{"p":{"x":0,"y":0}}'),
    ],
)
def test_values_become_compact_json_strings(value, expected):
    assert serialize(value, 1000) == expected


def test_content_array_passes_through_after_validation():
    parts = [
        {"type": "input_text", "text": "a chart"},
        InputImage(image_url="data:image/png;base64,AAAA"),
    ]
    out = serialize(parts, 1000)
    assert out == [InputText(text="a chart"), InputImage(image_url="data:image/png;base64,AAAA")]


def test_malformed_content_part_is_an_error():
    with pytest.raises(OutputError, match="image_url"):
        serialize([{"type": "input_image"}], 1000)


def test_unserializable_value_is_an_error():
    with pytest.raises(OutputError, match="object"):
        serialize(object(), 1000)


def test_truncation_states_original_length():
    text = "x" * 5000
    out = truncate(text, 200)
    assert len(out) <= 200
    assert out.startswith("x" * 100)
    assert "5000 characters" in out
    assert truncate("short", 200) == "short"


def test_truncation_applies_to_serialized_json_and_content_text():
    out = serialize(list(range(1000)), 150)
    assert isinstance(out, str) and len(out) <= 150 and "characters" in out
    parts = serialize([{"type": "input_text", "text": "y" * 500}], 150)
    assert isinstance(parts[0], InputText) and len(parts[0].text) <= 150
