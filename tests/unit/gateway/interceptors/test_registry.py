"""The filter registry (gateway.interceptors.registry): every table the runtime uses is
derived from the API modules' declarations, and a new API module is all it takes."""

from __future__ import annotations

import importlib
import pkgutil
import sys
from types import SimpleNamespace

import pytest

from gateway.interceptors import addresses, apis, dispatch, registry
from gateway.interceptors.filter import Filter, Mode
from gateway.protocol import (
    API_VERSIONS,
    DESCRIBE_CLUSTER,
    FETCH,
    FIND_COORDINATOR,
    METADATA,
    PRODUCE,
    SASL_AUTHENTICATE,
    UPDATE_FEATURES,
)
from tests.unit.gateway.conftest import NewPackage


def declared() -> dict[int, Filter]:
    """Each API module's FILTER, read from the modules themselves."""
    found = {}
    for info in pkgutil.iter_modules(apis.__path__):
        module = importlib.import_module(f"{apis.__name__}.{info.name}")
        found[module.FILTER.api_key] = module.FILTER
    return found


def test_every_api_module_is_in_the_registry() -> None:
    assert dict(registry.FILTERS) == declared()


def test_the_tables_are_what_the_modules_declare() -> None:
    filters = declared()
    rewritten = {k: f.rewritten_from for k, f in filters.items() if f.rewritten_from is not None}
    assert rewritten == registry.REWRITTEN_FROM
    assert set(registry.HEAD_REWRITTEN) == {k for k, f in filters.items() if f.mode is Mode.HEAD}
    assert set(registry.TAIL_REWRITTEN) == {k for k, f in filters.items() if f.mode is Mode.TAIL}
    assert dict(registry.REQUESTS) == {k: f for k, f in filters.items() if f.on_request is not None}
    assert dict(registry.RESPONSE_HOOKS) == {
        k: f.on_response for k, f in filters.items() if f.on_response is not None
    }
    # The runtime's names are the registry's tables, not copies of them.
    assert dispatch.REWRITTEN_FROM is registry.REWRITTEN_FROM
    assert addresses.REWRITTEN_RESPONSES is registry.REWRITTEN_FROM
    assert addresses.TAIL_REWRITTEN is registry.TAIL_REWRITTEN
    assert addresses.HEAD_REWRITTEN is registry.HEAD_REWRITTEN


def test_what_the_gateway_intercepts_today() -> None:
    # The behaviour the declarations pin down: which responses are rewritten from which
    # version, how each travels, and which requests are answered here.
    assert registry.REWRITTEN_FROM == {
        PRODUCE: 10,
        FETCH: 16,
        METADATA: 0,
        FIND_COORDINATOR: 0,
        DESCRIBE_CLUSTER: 0,
        78: 0,  # ShareFetch
        79: 0,  # ShareAcknowledge
    }
    assert registry.HEAD_REWRITTEN == (METADATA,)
    assert registry.TAIL_REWRITTEN == (PRODUCE, FETCH)
    assert dict(registry.STREAMED_TAILS) == {FETCH: 64 * 1024}
    assert set(registry.REQUESTS) == {
        API_VERSIONS,
        UPDATE_FEATURES,
        DESCRIBE_CLUSTER,
        SASL_AUTHENTICATE,
    }
    assert set(registry.RESPONSE_HOOKS) == {DESCRIBE_CLUSTER, SASL_AUTHENTICATE}
    assert registry.REQUESTS[API_VERSIONS].any_version
    served = {k for k, f in registry.REQUESTS.items() if f.replaces_upstream}
    assert served == {UPDATE_FEATURES, DESCRIBE_CLUSTER}
    # SaslAuthenticate is only observed (who logs in): held back, shown, passed on as it
    # came both ways, and neither decoded nor capped to the codec.
    assert {k for k, f in registry.FILTERS.items() if f.observes} == {SASL_AUTHENTICATE}
    assert registry.RESPONSES_FROM == {**registry.REWRITTEN_FROM, SASL_AUTHENTICATE: 0}
    assert SASL_AUTHENTICATE not in registry.DECODED
    assert SASL_AUTHENTICATE not in dispatch.codec_limits()


def test_an_observed_api_is_not_also_changed() -> None:
    def hook(*args: object) -> None:
        return None

    with pytest.raises(ValueError, match="not also changed"):
        Filter(SASL_AUTHENTICATE, rewritten_from=0, on_response=hook, observes=True)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="not also changed"):
        Filter(SASL_AUTHENTICATE, on_request=hook, any_version=True, observes=True)  # type: ignore[arg-type]


def gateway_view(*, features: bool, synthesizes: bool) -> SimpleNamespace:
    return SimpleNamespace(
        features=SimpleNamespace(enabled=features),
        synthesizes_describe_cluster=lambda upstream: synthesizes,
    )


@pytest.mark.parametrize(("features", "synthesizes"), [(False, False), (True, True)])
def test_held_back_follows_each_filters_condition(features: bool, synthesizes: bool) -> None:
    gw = gateway_view(features=features, synthesizes=synthesizes)
    conditional = {UPDATE_FEATURES, DESCRIBE_CLUSTER} if features else set()
    assert set(dispatch.served_for_upstream(gw, {})) == conditional  # type: ignore[arg-type]
    held = set(dispatch.held_back(gw, {}))  # type: ignore[arg-type]
    assert held == {API_VERSIONS, SASL_AUTHENTICATE} | conditional


def test_the_lane_tables_keep_to_the_forwarded_rewritten_versions() -> None:
    passthrough = {PRODUCE: (3, 11), FETCH: (4, 12), METADATA: (1, 12), FIND_COORDINATOR: (0, 4)}
    assert dispatch.lane_heads(passthrough) == {METADATA: (1, 12)}
    # Fetch 4-12 has no NodeEndpoints (v16+): nothing of it is walked.
    assert set(dispatch.lane_walks(passthrough)) == {(PRODUCE, 10), (PRODUCE, 11)}


def test_a_new_api_is_one_new_module(new_package: NewPackage) -> None:
    more_apis = new_package(
        "more_apis",
        {
            # The real ones, unchanged, beside one more.
            "metadata": "from gateway.interceptors.apis.metadata import FILTER\n",
            "produce": "from gateway.interceptors.apis.produce import FILTER\n",
            "vendor": """
                from gateway.interceptors.filter import Filter, Mode

                FILTER = Filter(4242, rewritten_from=2, mode=Mode.TAIL, stream_tail_from=1024)
            """,
            # Answered here from every version, its answer's body checked on the way out.
            "hooked": """
                from gateway.interceptors.filter import AS_IT_CAME, Answer, Filter

                def answer(ctx, request, body):
                    return Answer(b"")

                def check(ctx, entry, body):
                    return AS_IT_CAME

                FILTER = Filter(
                    4243, on_request=answer, any_version=True, rewritten_from=1, on_response=check
                )
            """,
            "_helpers": "NOT_AN_API = True\n",
        },
    )
    derived = registry.derive(registry.discover(more_apis))
    assert derived.rewritten_from == {PRODUCE: 10, METADATA: 0, 4242: 2, 4243: 1}
    assert derived.tail_rewritten == (PRODUCE, 4242)
    assert derived.head_rewritten == (METADATA,)
    assert dict(derived.streamed_tails) == {4242: 1024}
    # What the lane must hold back and decode follows from the hooks registered.
    assert dict(derived.decoded) == {PRODUCE: 10, METADATA: 0, 4242: 2, 4243: 0}
    hooked = sys.modules["more_apis.hooked"]
    assert dict(derived.requests) == {4243: hooked.FILTER}
    assert dict(derived.response_hooks) == {4243: hooked.check}
    assert dict(derived.responses_from) == {PRODUCE: 10, METADATA: 0, 4242: 2, 4243: 1}


@pytest.mark.parametrize(
    ("modules", "error"),
    [
        ({"a": "FILTER = None\n"}, "declares no FILTER"),
        (
            {
                "a": "from gateway.interceptors.apis.metadata import FILTER\n",
                "b": "from gateway.interceptors.apis.metadata import FILTER\n",
            },
            "declared twice",
        ),
    ],
)
def test_a_module_that_declares_no_filter_or_a_key_twice_is_refused(
    new_package: NewPackage, modules: dict[str, str], error: str
) -> None:
    bad_apis = new_package("bad_apis", modules)
    with pytest.raises((TypeError, ValueError), match=error):
        registry.discover(bad_apis)


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({}, "intercepts nothing"),
        ({"mode": Mode.HEAD, "on_request": print}, "needs rewritten_from"),
        ({"on_response": print}, "on_response needs rewritten_from"),
        ({"rewritten_from": 0, "stream_tail_from": 10}, "needs Mode.TAIL"),
        ({"rewritten_from": 0, "any_version": True}, "need an on_request hook"),
    ],
)
def test_a_filter_that_contradicts_itself_is_refused(kwargs: dict, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        Filter(4242, **kwargs)
