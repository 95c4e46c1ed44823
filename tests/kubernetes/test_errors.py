"""Nothing from kubernetes-asyncio or aiohttp escapes the driver's edge unmapped."""

from __future__ import annotations

import json

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import ConfigException
from multidict import CIMultiDict, CIMultiDictProxy
from yarl import URL

from asyncdeploy import (
    AsyncDeployError,
    EngineAPIError,
    EngineTimeout,
    EngineUnavailable,
    WorkloadConflict,
    WorkloadNotFound,
)
from asyncdeploy.drivers.kubernetes._errors import map_errors, status_error, status_message


def _api_exception(status: int, body: dict[str, object] | str) -> ApiException:
    exc = ApiException(status=status, reason="x")
    exc.body = (body if isinstance(body, str) else json.dumps(body)).encode()
    return exc


_REQUEST = aiohttp.RequestInfo(URL("https://k8s/api"), "GET", CIMultiDictProxy(CIMultiDict()))


@pytest.mark.parametrize(
    ("raised", "expected"),
    [
        (_api_exception(403, {"kind": "Status", "message": "pods is forbidden"}), EngineAPIError),
        (
            _api_exception(404, {"kind": "Status", "message": 'pods "x" not found'}),
            WorkloadNotFound,
        ),
        (_api_exception(405, {"kind": "Status", "message": "not allowed"}), EngineAPIError),
        (_api_exception(409, {"kind": "Status", "message": "already exists"}), WorkloadConflict),
        (_api_exception(410, {"kind": "Status", "message": "too old"}), EngineAPIError),
        (_api_exception(422, {"kind": "Status", "message": "is invalid"}), EngineAPIError),
        (_api_exception(500, "<html>proxy error</html>"), EngineAPIError),
        (
            aiohttp.WSServerHandshakeError(_REQUEST, (), status=404, message="Not Found"),
            WorkloadNotFound,
        ),
        (aiohttp.ClientOSError(111, "refused"), EngineUnavailable),
        (aiohttp.ServerDisconnectedError(), EngineUnavailable),
        (aiohttp.ClientPayloadError("cut short"), EngineUnavailable),
        (ConnectionResetError(), EngineUnavailable),
        (aiohttp.ServerTimeoutError("read"), EngineTimeout),
        (TimeoutError(), EngineTimeout),
        (ConfigException("no context"), EngineUnavailable),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else v.__name__,
)
def test_every_lower_layer_error_becomes_an_asyncdeploy_error(
    raised: BaseException, expected: type[AsyncDeployError]
) -> None:
    with pytest.raises(expected) as caught, map_errors("do it"):
        raise raised
    assert caught.value.__cause__ is raised
    assert type(caught.value) is expected  # not a broader class than the status says
    assert str(caught.value).startswith(("do it", "[")) and "engine=kubernetes" in str(caught.value)


def test_status_errors_carry_the_status_and_the_servers_message() -> None:
    error = status_error(
        422, {"kind": "Status", "message": 'Pod "x" is invalid: spec: bad'}, "create"
    )
    assert isinstance(error, EngineAPIError)
    assert error.status == 422
    assert error.message == '[422] create: Pod "x" is invalid: spec: bad'


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b'{"kind":"Status","message":"m","reason":"r"}', "m"),
        ('{"kind":"Status","reason":"Expired"}', "Expired"),
        ("not json at all\n", "not json at all"),
        (None, ""),
    ],
)
def test_status_message_reads_what_there_is(body: bytes | str | None, message: str) -> None:
    assert status_message(body) == message
