"""The shape grammar ``CTXxQ``: a chunk of ``Q`` new queries over ``CTX`` keys of earlier context.

Grammar (case-insensitive, whitespace ignored)::

    shape  := number "x" number
    number := digits [ "." digits ] [ "K" ]      # K = 1024; a fraction needs K

``32Kx1024`` is 32768 x 1024; ``2.1Kx256`` is 2150 x 256 (fractions of K are rounded down,
``int(2.1 * 1024)``); ``0x1536`` is a first chunk of 1536 queries with no earlier context;
``1023x113`` plain integers. Context may be 0; queries must be at least 1.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Iterable

from pa_bench.errors import ShapeError

GRAMMAR = "CTXxQ, e.g. 32Kx1024, 2.1Kx256 or 0x1536 (K = 1024, fractions of K rounded down)"

_NUMBER = r"(\d+(?:\.\d+)?)(k?)"
_SHAPE_RE = re.compile(rf"^{_NUMBER}[x×]{_NUMBER}$")

# Keys are indexed with int32 in the kernels' page tables.
MAX_KEYS = 2**31 - 1


@dataclass(frozen=True)
class Shape:
    """One chunk: ``queries`` new tokens at absolute positions ``context .. context+queries-1``."""

    context: int
    queries: int
    label: str

    @property
    def keys(self) -> int:
        """Keys the last query sees: the earlier context plus the chunk itself."""
        return self.context + self.queries

    @property
    def spec(self) -> str:
        """The exact numbers as a parseable string, e.g. ``2150x256``."""
        return f"{self.context}x{self.queries}"

    @property
    def written(self) -> str:
        """The shape as a config writes it: its label where the label parses to the same
        numbers (``32Kx1024``), else its exact numbers (``0x1536`` for a shape labelled 1.5K)."""
        try:
            same = parse_shape(self.label)
        except ShapeError:
            return self.spec
        return self.label if (same.context, same.queries) == (self.context, self.queries) else self.spec

    def __str__(self) -> str:
        return self.label


def _number(text: str, digits: str, kilo: str, what: str) -> int:
    value = Fraction(digits)  # exact decimal, so 2.1 * 1024 floors to 2150, not 2150.3999
    if kilo:
        value *= 1024
    elif value.denominator != 1:
        raise ShapeError(
            f"bad shape {text!r}: {what} {digits} is not a whole number "
            f"(a fraction needs K); expected {GRAMMAR}"
        )
    return int(value)  # int() of a positive Fraction rounds down


def parse_shape(text: str, label: str | None = None) -> Shape:
    """Parse one ``CTXxQ`` string; ``label`` overrides the display label (default: the text)."""
    if isinstance(text, Shape):
        return text if label is None else Shape(text.context, text.queries, label)
    if not isinstance(text, str):
        raise ShapeError(f"bad shape {text!r}: expected a string {GRAMMAR}")
    compact = "".join(text.split())
    match = _SHAPE_RE.match(compact.lower())
    if not match:
        raise ShapeError(f"bad shape {text!r}: expected {GRAMMAR}")
    context = _number(text, match.group(1), match.group(2), "context")
    queries = _number(text, match.group(3), match.group(4), "queries")
    if queries < 1:
        raise ShapeError(f"bad shape {text!r}: queries must be at least 1; expected {GRAMMAR}")
    if context + queries > MAX_KEYS:
        raise ShapeError(f"bad shape {text!r}: {context + queries} keys is more than 2^31 - 1")
    if label is not None and not str(label).strip():
        raise ShapeError(f"bad shape {text!r}: empty label")
    return Shape(context=context, queries=queries, label=compact if label is None else str(label))


def split_shape_list(text: str) -> list[str]:
    """The items of a comma list of shapes. One trailing comma is allowed (``1Kx5,``); any other
    empty item (``1Kx5,,``, ``1Kx5,,2Kx8``) is a typo that would silently drop a shape: an error.
    A list with no shape at all gives [] (the caller says that nothing was given)."""
    items = text.split(",")
    if len(items) > 1 and not items[-1].strip():
        items = items[:-1]  # the trailing comma
    if not any(i.strip() for i in items):
        return []
    for n, item in enumerate(items, start=1):
        if not item.strip():
            raise ShapeError(f"bad shape list {text!r}: item {n} of {len(items)} is empty "
                             f"(remove the extra comma); expected a comma list of {GRAMMAR}")
    return items


def parse_shapes(text: str | Iterable[str | Shape]) -> tuple[Shape, ...]:
    """Parse a comma-separated list (``"32Kx1024,64Kx512"``) or a list of strings/Shapes.

    One trailing comma is allowed; any other empty item (:func:`split_shape_list`), an empty
    list or a shape given twice is an error.
    """
    items = split_shape_list(text) if isinstance(text, str) else list(text)
    shapes: list[Shape] = []
    seen: dict[tuple[int, int], str] = {}
    for item in items:
        if isinstance(item, str) and not item.strip():
            raise ShapeError(f"bad shape list {text!r}: an empty shape; expected {GRAMMAR}")
        shape = parse_shape(item)
        key = (shape.context, shape.queries)
        if key in seen:
            raise ShapeError(
                f"shape {shape.label!r} is listed twice (same as {seen[key]!r}: {shape.spec})"
            )
        seen[key] = shape.label
        shapes.append(shape)
    if not shapes:
        raise ShapeError(f"no shapes given in {text!r}; expected a comma list of {GRAMMAR}")
    return tuple(shapes)
