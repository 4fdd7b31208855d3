"""Produce: KIP-951's NodeEndpoints (v10+), a tag of the body's top-level tagged section,
rewritten to gateway addresses (``Mode.TAIL``): a response whose section is empty, the
common case, passes untouched."""

from ...protocol import PRODUCE
from ..filter import Filter, Mode

FILTER = Filter(PRODUCE, rewritten_from=10, mode=Mode.TAIL)
