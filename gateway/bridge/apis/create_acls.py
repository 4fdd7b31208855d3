"""CreateAcls v0: field by field, both ways. Each creation takes ``PatternType`` LITERAL
(3), the spec's default for v1, which is what v0 always meant (Kafka's CreateAcls v0 had
LITERAL only)."""

from ..conversion import Conversion

CONVERSION = Conversion("CreateAcls")
