"""What the validator found wrong with one file: each problem once, in the order found.

Its own module so that the checks of each method (`method_checks`) and of the data maps
(`data_maps`) add to it without importing each other.
"""

from __future__ import annotations

__all__ = ["Problems"]


class Problems:
    """The problems of one file, in the order found, each once."""

    def __init__(self) -> None:
        self.lines: dict[str, None] = {}

    def add(self, line: str) -> None:
        self.lines.setdefault(line, None)
