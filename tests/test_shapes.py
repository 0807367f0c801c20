"""The CTXxQ shape grammar."""

import pytest

from pa_bench.errors import PaBenchError, ShapeError
from pa_bench.problem.shapes import Shape, parse_shape, parse_shapes


@pytest.mark.parametrize("text, context, queries", [
    ("32Kx1024", 32768, 1024),
    ("64Kx512", 65536, 512),
    ("2.1Kx256", 2150, 256),  # int(2.1 * 1024) = 2150, rounded down
    ("1.5Kx1", 1536, 1),
    ("0x1536", 0, 1536),
    ("1023x113", 1023, 113),
    ("32kX1024", 32768, 1024),  # case-insensitive
    (" 32K x 1024 ", 32768, 1024),  # whitespace tolerant
    ("1Kx1K", 1024, 1024),
    ("0.999Kx2", 1022, 2),  # 1022.976 rounded down
    ("128Kx2048", 131072, 2048),
])
def test_parse_shape_numbers(text, context, queries):
    s = parse_shape(text)
    assert (s.context, s.queries) == (context, queries)
    assert s.keys == context + queries
    assert s.spec == f"{context}x{queries}"


def test_contract_example_and_labels():
    assert parse_shape("32Kx1024") == Shape(context=32768, queries=1024, label="32Kx1024")
    assert parse_shape(" 2.1K x 256").label == "2.1Kx256"
    labelled = parse_shape("0x1536", label="1.5K")
    assert (labelled.context, labelled.queries, labelled.label) == (0, 1536, "1.5K")
    assert str(labelled) == "1.5K"
    # Exactness: the decimal is exact, so no float artefact moves the floor.
    assert parse_shape("2.1Kx1").context == int(2.1 * 1024) == 2150


@pytest.mark.parametrize("bad", [
    "", "32K", "x1024", "32Kx", "32Kx0", "32Mx1024", "abc", "32Kx1024x2", "-1x5",
    "2.5x3",  # a fraction needs K
    "1,5Kx3", "32K*1024", "Kx1",
])
def test_bad_shapes_name_the_string_and_the_grammar(bad):
    with pytest.raises(ShapeError) as info:
        parse_shape(bad)
    message = str(info.value)
    assert repr(bad) in message
    assert "CTXxQ" in message
    assert isinstance(info.value, PaBenchError)
    assert "\n" not in message


def test_non_string_is_a_shape_error():
    with pytest.raises(ShapeError, match="1024"):
        parse_shape(1024)


def test_parse_shapes_comma_list():
    shapes = parse_shapes("32Kx1024, 64Kx512,0x1536,")
    assert [(s.context, s.queries) for s in shapes] == [(32768, 1024), (65536, 512), (0, 1536)]
    assert parse_shapes(["1Kx2", parse_shape("0x3", "three")])[1].label == "three"


def test_parse_shapes_errors():
    with pytest.raises(ShapeError, match="bogus"):
        parse_shapes("32Kx1024,bogus")
    with pytest.raises(ShapeError, match="twice"):
        parse_shapes("1Kx256,1024x256")
    with pytest.raises(ShapeError, match="no shapes"):
        parse_shapes(" , ")


def test_shape_is_frozen_and_hashable():
    s = parse_shape("1Kx1")
    with pytest.raises(Exception):
        s.context = 5
    assert {s: 1}[parse_shape("1Kx1")] == 1
