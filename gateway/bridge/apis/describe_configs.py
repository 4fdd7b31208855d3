"""DescribeConfigs v0. Going up, v1's ``IncludeSynonyms`` takes its default, false: v0 has
no synonyms. Coming down, ``IsDefault`` is "the value is Kafka's default", which v1 says
as ``ConfigSource`` DEFAULT_CONFIG (5): Kafka's ``DescribeConfigsResponse`` wrote v0's
``isDefault`` as ``source == DEFAULT_CONFIG`` (2.x), and reads it back as that source.
(3.9's broker, on generated messages, no longer set it at all and answered every v0
config as not default: the bridge keeps the meaning, not that regression.)"""

from __future__ import annotations

from typing import Any

from ..conversion import Conversion
from ..messages import Message

# Kafka's ConfigSource.DEFAULT_CONFIG.
DEFAULT_CONFIG = 5


def is_default(values: Message, version: int, state: Any) -> int:
    if version == 0:
        for result in values["Results"] or ():
            for config in result["Configs"] or ():
                config["IsDefault"] = config.get("ConfigSource") == DEFAULT_CONFIG
    return 0


CONVERSION = Conversion("DescribeConfigs", down=is_default)
