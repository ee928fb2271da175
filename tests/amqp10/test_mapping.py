"""The message mapping (docs/amqp-1-0.md, "The message mapping"): a 1.0 message stored as
a 0-9-1 one and sent back as 1.0 keeps what the table says it keeps."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from broker.amqp10 import codec
from broker.amqp10.mapping import (
    AMQP_1_0_TYPE,
    data_head,
    stored_form,
    to_message,
    to_properties,
)
from broker.amqp10.sections import (
    AmqpMessage,
    AmqpSequence,
    AmqpValue,
    Data,
    Header,
    Properties,
    parse_message,
)
from broker.amqp10.types import Symbol, Timestamp, UByte, UInt, ULong
from broker.core import properties as basic

short = st.text(st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40)
ids = st.one_of(short.filter(bool), st.uuids(), st.integers(0, 2**64 - 1).map(ULong))
#: Application property names: an "x-" one becomes an "x-" header, which maps back to a
#: message annotation (the table's rule, as RabbitMQ 4's), so it does not come back as it
#: went (docs/amqp-1-0.md); hypothesis found it in a loaded run: left out here.
application = st.dictionaries(
    short.filter(lambda name: not name.startswith("x-")),
    st.one_of(short, st.integers(-(2**63), 2**63 - 1), st.booleans(), st.binary(max_size=20)),
    max_size=4,
)


def round_trip(message: AmqpMessage, delivery_count: int = 0) -> AmqpMessage:
    props, body = to_properties(message)
    return parse_message(to_message(basic.encode(props), body, delivery_count))


@settings(max_examples=40)
@given(
    st.booleans(),
    st.integers(0, 9).map(UByte),
    st.none() | st.integers(1, 2**31).map(UInt),
    ids,
    st.none() | ids,
    st.none() | short,
    st.none() | st.text(st.characters(max_codepoint=127), min_size=1, max_size=20),
    application,
    st.binary(max_size=50),
)
def test_what_the_table_maps_comes_back(
    durable: bool, priority: UByte, ttl: UInt | None, message_id: Any, correlation_id: Any,
    reply_to: str | None, content_type: str | None, app: dict[str, Any], body: bytes,
) -> None:  # fmt: skip
    sent = AmqpMessage(
        header=Header(durable=durable, priority=priority, ttl=ttl),
        properties=Properties(
            message_id=message_id, correlation_id=correlation_id, reply_to=reply_to or None,
            content_type=Symbol(content_type) if content_type else None,
            creation_time=Timestamp(1_700_000_000_000),
        ),
        application_properties=app or None,
        body=[Data(body)],
    )  # fmt: skip
    back = round_trip(sent)
    assert back.header is not None and back.properties is not None
    assert back.header.durable == durable and back.header.priority == priority
    assert back.header.ttl == ttl
    expected_id = str(int(message_id)) if isinstance(message_id, ULong) else message_id
    assert back.properties.message_id == expected_id  # a ulong comes back as its text
    expected_correlation = (
        str(int(correlation_id)) if isinstance(correlation_id, ULong) else correlation_id
    )
    assert back.properties.correlation_id == expected_correlation
    assert back.properties.reply_to == (reply_to or None)
    assert back.properties.content_type == content_type
    assert back.properties.creation_time == 1_700_000_000_000
    assert (back.application_properties or {}) == app
    assert back.data == body


def test_the_0_9_1_properties_of_a_1_0_message() -> None:
    message = AmqpMessage(
        header=Header(durable=True, priority=UByte(7), ttl=UInt(1500)),
        properties=Properties(
            message_id=uuid.UUID(int=1), user_id=b"guest", correlation_id=b"\x00binary",
            content_type=Symbol("text/plain"), group_id="app",
        ),
        application_properties={"k": "v"},
        message_annotations={Symbol("x-opt-kept"): 1, Symbol("dropped"): 2},
        body=[Data(b"body")],
    )  # fmt: skip
    props, body = to_properties(message)
    assert body == b"body" and props.delivery_mode == 2 and props.priority == 7
    assert props.expiration == "1500" and props.user_id == "guest" and props.app_id == "app"
    assert props.message_id == "urn:uuid:00000000-0000-0000-0000-000000000001"
    assert props.correlation_id is None
    assert props.headers == {
        "k": "v", "x-correlation-id": bytearray(b"\x00binary"), "x-opt-kept": 1,
    }  # fmt: skip
    back = round_trip(message)
    assert back.properties is not None and back.properties.correlation_id == b"\x00binary"


@pytest.mark.parametrize(
    "sections",
    [[AmqpValue("text")], [AmqpSequence([1, 2])], [Data(b"a"), Data(b"b")]],
)
def test_a_body_other_than_one_data_section_is_kept_encoded(sections: list[Any]) -> None:
    message = AmqpMessage(body=sections)
    props, body = to_properties(message)
    assert props.message_type == AMQP_1_0_TYPE
    assert parse_message(body).body == sections  # the sections, encoded
    assert round_trip(message).body == sections


def test_a_0_9_1_message_as_1_0() -> None:
    from pamqp import commands

    props = commands.Basic.Properties(
        content_type="application/json", headers={"a": 1, "x-b": "c", "t": {"nested": 1}},
        message_type="order", delivery_mode=1,
    )  # fmt: skip
    back = parse_message(to_message(basic.encode(props), b"{}", 2))
    assert back.data == b"{}" and back.header is not None
    assert back.header.delivery_count == 2 and not back.header.durable
    assert back.application_properties == {"a": 1}  # a table value does not cross
    assert back.message_annotations == {"x-b": "c", "x-basic-type": "order"}
    assert back.properties is not None and back.properties.content_type == "application/json"


@given(st.binary(max_size=300))
def test_a_data_section_framed_by_hand_is_the_codecs(body: bytes) -> None:
    assert data_head(len(body)) + body == codec.encode(Data(body))


def test_deliveries_past_the_cached_counts_and_shared_properties() -> None:
    from pamqp import commands

    raw = basic.encode(commands.Basic.Properties(delivery_mode=2, priority=7))
    for count in (0, 1, 8, 9, 300):
        message = parse_message(to_message(raw, b"body", count))
        assert message.header is not None and message.header.delivery_count == count
        assert message.header.first_acquirer is (count == 0) and message.header.durable
        assert message.header.priority == 7 and message.data == b"body"


@settings(max_examples=60)
@given(
    st.booleans(),
    st.none() | ids,
    st.none() | short,
    application,
    st.lists(st.binary(max_size=300), min_size=1, max_size=2),
    st.booleans(),
)
def test_the_stored_form_is_the_whole_parse(
    durable: bool, message_id: Any, to: str | None, app: dict[str, Any], bodies: list[bytes],
    value_body: bool,
) -> None:  # fmt: skip
    """The split at a trailing data section (and its cache) gives what parsing the whole
    message gives, for data bodies, several data sections, amqp-value bodies, and bodies
    or properties that hold a data section's own bytes."""
    sections: list[Any] = [AmqpValue(bodies[0])] if value_body else [Data(b) for b in bodies]
    app = {**app, "trap": b"\x00\x53\x75\xa0\x05"}  # a data section's start, inside a map
    message = AmqpMessage(
        header=Header(durable=durable),
        properties=Properties(message_id=message_id, to=to or None),
        application_properties=app,
        body=sections,
    )
    payload = message.encode()
    props, body = to_properties(parse_message(payload))
    found = stored_form(payload)
    assert found == (basic.encode(props), body, props.user_id, to or None)
    assert stored_form(payload) == found  # from the cache
