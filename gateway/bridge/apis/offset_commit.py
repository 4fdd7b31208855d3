"""OffsetCommit: field by field, both ways."""

from ..conversion import Conversion

CONVERSION = Conversion("OffsetCommit")
