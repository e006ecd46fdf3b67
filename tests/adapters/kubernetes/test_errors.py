"""The client library's failures arrive as the adapter's own errors, translated once."""

from __future__ import annotations

import json

import pytest
import urllib3.exceptions
from kubernetes.client.exceptions import ApiException

from adapters.kubernetes import errors


def api_exception(status: int, body: dict | None = None, headers: dict | None = None):
    exc = ApiException(status=status, reason="HTTP reason")
    exc.body = json.dumps(body) if body is not None else None
    exc.headers = headers
    return exc


def status_body(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "code": code, "reason": reason, "message": message}


@pytest.mark.parametrize(
    ("status", "expected", "transient"),
    [
        pytest.param(400, errors.APIBadRequestError, False, id="400"),
        pytest.param(401, errors.APIUnauthorizedError, False, id="401"),
        pytest.param(403, errors.APIForbiddenError, False, id="403"),
        pytest.param(404, errors.APINotFoundError, False, id="404"),
        pytest.param(409, errors.APIConflictError, False, id="409"),
        pytest.param(410, errors.APIGoneError, False, id="410"),
        pytest.param(422, errors.APIInvalidError, False, id="422"),
        pytest.param(429, errors.APITooManyRequestsError, True, id="429"),
        pytest.param(500, errors.APIServerError, True, id="500"),
        pytest.param(503, errors.APIUnavailableError, True, id="503"),
        pytest.param(504, errors.APIUnavailableError, True, id="504"),
        pytest.param(0, errors.APIConnectionError, True, id="no-answer"),
        pytest.param(418, errors.APIError, False, id="other"),
    ],
)
def test_status_codes_map_to_one_error_each(status, expected, transient) -> None:
    with pytest.raises(errors.APIError) as raised, errors.translating():
        raise api_exception(status, status_body(status, "Why", "what happened"))
    assert type(raised.value) is expected
    assert raised.value.transient is transient
    assert raised.value.status == status
    assert isinstance(raised.value.__cause__, ApiException)  # kept for the logs


def test_the_status_body_is_read() -> None:
    body = status_body(409, "Conflict", "the object has been modified")
    error = errors.from_api_exception(api_exception(409, {**body, "details": {"name": "x"}}))
    assert (error.reason, error.message, error.details) == (
        "Conflict",
        "the object has been modified",
        {"name": "x"},
    )


def test_a_watch_error_event_is_translated() -> None:
    # Watch.stream raises ERROR events as ApiException(status, "Reason: message").
    exc = ApiException(status=410, reason="Expired: too old resource version: 5 (10)")
    error = errors.from_api_exception(exc)
    assert isinstance(error, errors.APIGoneError)
    assert (error.reason, error.message) == ("Expired", "too old resource version: 5 (10)")


@pytest.mark.parametrize(
    ("headers", "retry_after"),
    [
        pytest.param({"Retry-After": "3"}, 3.0, id="given"),
        pytest.param({"Retry-After": "soon"}, None, id="unparsable"),
        pytest.param(None, None, id="absent"),
    ],
)
def test_throttling_keeps_retry_after(headers, retry_after) -> None:
    error = errors.from_api_exception(
        api_exception(429, status_body(429, "TooMany", "slow"), headers)
    )
    assert isinstance(error, errors.APITooManyRequestsError)
    assert error.retry_after == retry_after


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        pytest.param(
            urllib3.exceptions.ReadTimeoutError(None, "/", "read timed out"),
            errors.APITimeoutError,
            id="read-timeout",
        ),
        pytest.param(
            urllib3.exceptions.MaxRetryError(
                None, "/", urllib3.exceptions.ConnectTimeoutError("connect timed out")
            ),
            errors.APITimeoutError,
            id="retries-ended-in-timeout",
        ),
        pytest.param(
            urllib3.exceptions.MaxRetryError(None, "/", urllib3.exceptions.ProtocolError("reset")),
            errors.APIConnectionError,
            id="retries-ended-in-reset",
        ),
        pytest.param(
            urllib3.exceptions.ProtocolError("connection aborted"),
            errors.APIConnectionError,
            id="protocol",
        ),
        pytest.param(ConnectionRefusedError(), errors.APIConnectionError, id="refused"),
    ],
)
def test_transport_failures_are_connection_errors(raised, expected) -> None:
    with pytest.raises(errors.APIError) as caught, errors.translating():
        raise raised
    assert type(caught.value) is expected
    assert caught.value.transient


def test_other_exceptions_pass_through() -> None:
    with pytest.raises(KeyError), errors.translating():
        raise KeyError("not an API failure")
