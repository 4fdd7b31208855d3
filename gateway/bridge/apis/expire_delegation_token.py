"""ExpireDelegationToken v0: field by field, both ways ("Version 1 is the same as
version 0")."""

from ..conversion import Conversion

CONVERSION = Conversion("ExpireDelegationToken")
