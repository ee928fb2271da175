"""Errors of the management API: JSON 404/405/500, AMQP reply codes mapped to HTTP statuses."""

from __future__ import annotations

import datetime
import decimal
from typing import Any

import pytest

from broker.core.errors import AmqpError, ReplyCode
from broker.management.errors import http_status
from tests.management.support import FakeBroker, serve


def test_unknown_paths_and_methods_are_json() -> None:
    broker = FakeBroker()

    async def scenario(client: Any) -> None:
        response = await client.get("/api/nothing")
        assert response.status == 404
        assert response.content_type == "application/json"
        assert (await response.json())["error"] == "not_found"

        response = await client.post("/api/queues/q")
        assert response.status == 405
        assert response.content_type == "application/json"
        assert "PUT" in response.headers["Allow"]

    serve(broker, scenario)


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (ReplyCode.NOT_FOUND, 404),
        (ReplyCode.ACCESS_REFUSED, 403),
        (ReplyCode.RESOURCE_LOCKED, 409),
        (ReplyCode.PRECONDITION_FAILED, 400),
        (ReplyCode.COMMAND_INVALID, 400),
        (ReplyCode.RESOURCE_ERROR, 400),
    ],
)
def test_amqp_error_mapping(code: ReplyCode, status: int) -> None:
    assert http_status(AmqpError(code, "x")) == status


def test_precondition_on_delete_maps_to_409() -> None:
    error = AmqpError(ReplyCode.PRECONDITION_FAILED, "x")
    assert http_status(error, precondition=409) == 409


def test_an_unexpected_error_is_a_json_500_without_traceback() -> None:
    broker = FakeBroker()

    def explode() -> Any:
        raise RuntimeError("boom")

    broker.vhost.bindings = explode

    async def scenario(client: Any) -> None:
        response = await client.get("/api/bindings")
        assert response.status == 500
        body = await response.json()
        assert body["error"] == "internal_server_error"
        assert "boom" not in body["reason"]
        # The server is still up.
        assert (await client.get("/api/status")).status == 200

    serve(broker, scenario)


def test_non_json_argument_values_are_rendered() -> None:
    broker = FakeBroker()
    when = datetime.datetime(2030, 1, 2, tzinfo=datetime.UTC)
    arguments = {"x-blob": b"\x00ab", "x-other": decimal.Decimal("1.5"), "x-when": when}
    broker.vhost.declare_queue("q", arguments=arguments)

    async def scenario(client: Any) -> None:
        response = await client.get("/api/queues/q")
        assert response.status == 200
        arguments = (await response.json())["arguments"]
        assert arguments["x-blob"] == "\x00ab"
        assert arguments["x-other"] == "1.5"
        assert arguments["x-when"] == "2030-01-02T00:00:00+00:00"

    serve(broker, scenario)
