"""Helpers of the management API tests: a stand-in Broker, a scenario runner, a metrics parser.

Most tests drive :func:`broker.management.api.create_app` through aiohttp's TestServer and
TestClient over a real virtual host, a real BrokerContext (real authenticator, sans-I/O
AMQP connections from :mod:`tests.amqp.helpers`) and :class:`FakeBroker`, a small stand-in
for the Broker. No pytest-asyncio: each test runs its scenario with ``asyncio.run``.
"""

from __future__ import annotations

import asyncio
import base64
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from broker.amqp.context import BrokerContext
from broker.core import properties
from broker.core.message import Message
from broker.management.api import create_app
from tests.amqp.helpers import make_context


def basic(user: str, password: str) -> dict[str, str]:
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"Authorization": f"Basic {token}"}


GUEST = basic("guest", "guest")


# -- a stand-in for broker.server.Broker ---------------------------------------------------
@dataclass
class FakeOptions:
    node_name: str = "node-a"
    auth: bool = False
    ha_agent: str | None = None
    metrics_per_queue: bool = False


@dataclass
class FakeBroker:
    context: BrokerContext = field(default_factory=make_context)
    options: FakeOptions = field(default_factory=FakeOptions)
    ha_state: str = "standalone"
    started_at: float = field(default_factory=lambda: time.time() - 5.0)
    amqp_port: int = 5672
    store_status: str = "none"
    store_id: str | None = None
    mgmt_port: int = 0

    @property
    def vhost(self) -> Any:
        return self.context.vhost

    def prepare_cluster_shutdown(self, shutdown_id: str, *, quiesce: bool) -> int:
        return 0


Scenario = Callable[[TestClient[web.Request, web.Application]], Awaitable[None]]


def serve(broker: FakeBroker, scenario: Scenario) -> None:
    """Run ``scenario`` against the management app of ``broker``."""

    async def main() -> None:
        async with TestClient(TestServer(create_app(broker))) as client:
            await scenario(client)

    asyncio.run(main())


def publish(broker: FakeBroker, exchange: str, routing_key: str, body: bytes = b"x") -> None:
    vhost = broker.context.vhost
    vhost.publish(vhost.exchange(exchange), Message(exchange, routing_key, properties.EMPTY, body))


# -- a Prometheus text-format parser for the tests ---------------------------------------
_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\\\|\\"|\\n)*"'
_SAMPLE = re.compile(rf"^({_NAME})(?:\{{((?:{_LABEL})(?:,{_LABEL})*)?\}})? (\S+)$")
_LABEL_PAIR = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\\\|\\"|\\n)*)"')


def _unescape(value: str) -> str:
    return re.sub(r"\\(.)", lambda m: {"n": "\n"}.get(m.group(1), m.group(1)), value)


def parse_metrics(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the text format; fails on any line that is not valid."""
    assert text.endswith("\n")
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    typed: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            assert re.match(rf"^# HELP {_NAME} .+$", line), line
            continue
        if line.startswith("# TYPE "):
            match = re.match(rf"^# TYPE ({_NAME}) (counter|gauge|untyped|summary|histogram)$", line)
            assert match, line
            typed[match.group(1)] = match.group(2)
            continue
        assert not line.startswith("#"), line
        match = _SAMPLE.match(line)
        assert match, f"not a sample line: {line!r}"
        name, labels, value = match.groups()
        assert name in typed, f"sample {name} before its TYPE line"
        pairs = frozenset((k, _unescape(v)) for k, v in _LABEL_PAIR.findall(labels or ""))
        key = (name, pairs)
        assert key not in samples, f"duplicate sample {line!r}"
        samples[key] = float(value)
    return samples


def sample(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str
) -> float:
    return samples[(name, frozenset(labels.items()))]
