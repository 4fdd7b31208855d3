"""Metadata: the brokers array rewritten to gateway addresses, every version.

The array comes before the topics and partitions that make up a large response's bulk,
so only the head up to its end is held back and the rest streams (``Mode.HEAD``).
"""

from ...protocol import METADATA
from ..filter import Filter, Mode

FILTER = Filter(METADATA, rewritten_from=0, mode=Mode.HEAD)
