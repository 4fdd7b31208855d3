"""The bridged APIs are the modules of gateway.bridge.apis: each declares its conversion
once, the bridge carries exactly those, and a new one is one new file."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from gateway import declared
from gateway.bridge import apis, convert, plan
from gateway.bridge.conversion import Conversion
from gateway.bridge.messages import decode, encode
from gateway.protocol import api_key_of
from tests.unit.gateway.conftest import NewPackage


def test_the_bridge_carries_exactly_the_declared_apis() -> None:
    modules = [
        importlib.import_module(f"{apis.__name__}.{info.name}")
        for info in pkgutil.iter_modules(apis.__path__)
    ]
    from_modules = {m.CONVERSION.api_key: m.CONVERSION for m in modules}
    assert from_modules == convert.CONVERSIONS
    assert set(plan.BRIDGED_APIS) == set(from_modules) == set(plan.removed())
    # Each module is named for its API, in Kafka's words.
    for module in modules:
        name = module.CONVERSION.api
        assert module.__name__.rsplit(".", 1)[1].replace("_", "") == name.lower()


def test_a_conversion_names_one_of_kafkas_apis() -> None:
    assert Conversion("OffsetCommit").api_key == 8
    with pytest.raises(ValueError, match="not one of Kafka's API names"):
        Conversion("OffsetComit")


def test_a_new_bridged_api_is_one_new_module(
    new_package: NewPackage, monkeypatch: pytest.MonkeyPatch
) -> None:
    # AlterConfigs v0, which Kafka 4 kept, as if it had not: its answer's throttle set
    # on the way down from what went up, to see both rules run.
    more = new_package(
        "more_conversions",
        {
            "produce": "from gateway.bridge.apis.produce import CONVERSION\n",
            "alter_configs": """
                from gateway.bridge.conversion import Conversion

                def down(values, version, state):
                    values["ThrottleTimeMs"] = state * 2
                    return 0

                CONVERSION = Conversion("AlterConfigs", up=lambda values: 21, down=down)
            """,
        },
    )
    found = declared.discover(more, "CONVERSION", Conversion)
    alter_configs = api_key_of("AlterConfigs")
    assert [c.api_key for c in found] == [0, alter_configs]
    monkeypatch.setattr(convert, "CONVERSIONS", {c.api_key: c for c in found})
    request = {"Resources": [], "ValidateOnly": False}
    up = convert.request_up(alter_configs, 0, 1, encode("AlterConfigsRequest", 0, request))
    assert up.awaited and decode("AlterConfigsRequest", 1, up.body) == request
    answer = encode("AlterConfigsResponse", 1, {"ThrottleTimeMs": 0, "Responses": []})
    down = decode("AlterConfigsResponse", 0, up.down(answer).body)
    assert down["ThrottleTimeMs"] == 42
