"""What a filter clause (:mod:`torch_tfrecord.codec.query`) means for one feature value, the same
wherever a filter runs: the viewer's page and a selection's scan
(:mod:`torch_tfrecord.data.select.conditions`).

A number is compared with a number as numbers, text with text as text; a number in a text clause
is its text (``3.0`` is ``"3"``). Pure, and free of torch: the viewer runs without it.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

__all__ = ["COMPARE", "number_text"]

COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "==": operator.eq,
    "!=": operator.ne,
    "<": operator.lt,
    "<=": operator.le,
    ">": operator.gt,
    ">=": operator.ge,
}
"""The ordering operators of a filter (``~``, "contains", is each side's own)."""


def number_text(value: float) -> str:
    """A filter's number as text: ``3.0`` -> ``"3"``, ``0.5`` -> ``"0.5"``."""
    return str(int(value)) if value == int(value) else str(value)
