"""Whole numbers written as text, read one way: ASCII digits only.

``str.isdigit()`` is true for superscripts (``¹``), which ``int()`` then refuses with a ValueError, and for other
scripts' digits (``٣``), which ``int()`` reads as numbers no Google API or file name of ours spells; every number
tpuctl reads from a user, a file name or a server's answer as text is checked here.
"""

from __future__ import annotations


def is_digits(text: str) -> bool:
    """``text`` is one or more ASCII digits (``0``-``9``), nothing else."""
    return text.isascii() and text.isdigit()


def whole_number(text: object, limit: int = 30) -> int | None:
    """``text`` as a whole number when it is a string of 1 to ``limit`` ASCII digits; None otherwise."""
    return int(text) if isinstance(text, str) and len(text) <= limit and is_digits(text) else None
