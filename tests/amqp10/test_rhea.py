"""node's rhea (npm, an AMQP 1.0 client) against a real broker: a sender whose durable
messages are each accepted, a receiver that gets them back with their application
properties and accepts them (tests/compat/node/rhea_client.js). ``make test`` installs
Node.js (Debian's ``nodejs``) and rhea (tests/compat/node/package-lock.json, through
deploy/node_lock_install.py), as for amqplib."""

from __future__ import annotations

import pytest

from tests.amqp10.helpers import declare, rhea_expected, run_rhea
from tests.broker_process import BrokerProcess

pytestmark = pytest.mark.xdist_group("amqp10_proton")  # the session's broker (conftest), one worker

N = 20


def test_rhea_sends_and_receives(broker: BrokerProcess) -> None:
    declare(broker, "rhea-q")
    result = run_rhea(broker.port, "rhea-q", N)
    assert result["accepted"] == N and result["product"] == "qpidd"
    assert result["received"] == rhea_expected(N)
