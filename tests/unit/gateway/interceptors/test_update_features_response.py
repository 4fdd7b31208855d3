"""UpdateFeatures answers (gateway.interceptors.update_features), decoded with kio."""

from __future__ import annotations

from kio.schema.update_features.v2.response import UpdateFeaturesResponse

from gateway.features.validation import INVALID_REQUEST, UpdateResult
from gateway.interceptors.update_features import update_features_response
from gateway.protocol import RequestHeader
from tests.harness import decode

NOT_SUPPORTED = (
    "Could not apply finalized feature update because the provided feature is not supported."
)


def answer(version: int, results: list[UpdateResult]) -> UpdateFeaturesResponse:
    header = RequestHeader(57, version, 7, "tests", 2)
    payload = update_features_response(header, results)
    return decode(UpdateFeaturesResponse, payload[5:])  # correlation id, empty header tags


def test_v2_names_the_feature_that_failed_a_request_of_several() -> None:
    # v2 has no per-feature results: a client shows the one message against every
    # feature, so it must say which failed (Kafka: "The update failed for all features
    # since the following feature had an error: ...").
    response = answer(
        2,
        [
            UpdateResult("streams.version"),
            UpdateResult("no.such.version", INVALID_REQUEST, NOT_SUPPORTED),
        ],
    )
    assert response.error_code == INVALID_REQUEST
    assert response.error_message == (
        "The update failed for all features since the following feature had an error: "
        f"no.such.version: {NOT_SUPPORTED}"
    )


def test_v2_of_one_feature_keeps_its_own_message() -> None:
    response = answer(2, [UpdateResult("no.such.version", INVALID_REQUEST, NOT_SUPPORTED)])
    assert response.error_message == NOT_SUPPORTED
