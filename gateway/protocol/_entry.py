"""One request of a connection, from its frame until its response went out.

Its own module because the in-flight table, the SASL exchange and the traffic counts
all take these entries; none of them needs the others to name the type. The type is
the scanner's (``_scanner``): the entries the scanner makes and those the readers make
are one kind, in one table.
"""

from __future__ import annotations

from ._scanner import InFlightRequest

__all__ = ["InFlightRequest"]
