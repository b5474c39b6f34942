"""The v1 wire format and id validation of ``snapshotd_client.protocol``, over real sockets."""

from __future__ import annotations

import socket
import threading
import time

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snapshotd_client.protocol import (
    BAD_FRAME,
    FRAME_TOO_LARGE,
    MAX_FRAME,
    PROTOCOL_VERSION,
    ProtocolError,
    decode_body,
    encode_frame,
    read_frame,
    validate_id,
    validate_int,
)


@pytest.fixture
def pair():
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    yield a, b
    a.close()
    b.close()


def test_constants():
    assert PROTOCOL_VERSION == 1
    assert MAX_FRAME == 1 << 20


def test_frame_layout_is_big_endian_length_then_msgpack():
    frame = encode_frame({"v": 1, "op": "ping", "id": 7})
    body = msgpack.packb({"v": 1, "op": "ping", "id": 7}, use_bin_type=True)
    assert frame == len(body).to_bytes(4, "big") + body


def test_round_trip_over_a_socket(pair):
    a, b = pair
    messages = [
        {"v": 1, "op": "ping", "id": 1},
        {"v": 1, "op": "snapshot", "id": "x", "cwd": "/tmp/é", "data": b"\x00\xff", "n": None,
         "nested": {"list": [1, 2.5, True], 3: "int key"}},
        {},
    ]
    for message in messages:
        a.sendall(encode_frame(message))
    for message in messages:
        assert read_frame(b) == message
    a.close()
    assert read_frame(b) is None  # clean EOF between frames


def test_frame_split_across_many_sends_is_reassembled(pair):
    a, b = pair
    frame = encode_frame({"blob": "x" * 100_000})

    def dribble() -> None:
        for i in range(0, len(frame), 997):
            a.sendall(frame[i:i + 997])

    t = threading.Thread(target=dribble)
    t.start()
    assert read_frame(b) == {"blob": "x" * 100_000}
    t.join()


def test_bin_and_str_stay_distinct(pair):
    a, b = pair
    a.sendall(encode_frame({"s": "abc", "b": b"abc"}))
    got = read_frame(b)
    assert got == {"s": "abc", "b": b"abc"}
    assert isinstance(got["s"], str) and isinstance(got["b"], bytes)


@settings(max_examples=50, deadline=None)
@given(st.dictionaries(st.text(max_size=20), st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text() | st.binary(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=5), inner,
                                                                  max_size=4),
    max_leaves=20)))
def test_round_trip_property(message):
    a, b = socket.socketpair()
    try:
        a.sendall(encode_frame(message))
        assert read_frame(b) == message
    finally:
        a.close()
        b.close()


def test_oversize_body_is_refused_when_encoding():
    # fixmap header (1) + fixstr "b" (2) + bin32 header (5) = 8 bytes around the payload.
    at_limit = {"b": b"x" * (MAX_FRAME - 8)}
    assert len(msgpack.packb(at_limit, use_bin_type=True)) == MAX_FRAME
    assert len(encode_frame(at_limit)) == MAX_FRAME + 4
    with pytest.raises(ValueError, match="exceeds"):
        encode_frame({"b": b"x" * (MAX_FRAME - 7)})


def test_encode_refuses_a_non_map():
    with pytest.raises(TypeError):
        encode_frame([1, 2])  # type: ignore[arg-type]


def test_oversize_announced_length_is_refused_without_reading_the_body(pair):
    a, b = pair
    a.sendall((MAX_FRAME + 1).to_bytes(4, "big"))
    with pytest.raises(ProtocolError) as info:
        read_frame(b)
    assert info.value.code == FRAME_TOO_LARGE


def test_truncated_body_is_a_protocol_error(pair):
    a, b = pair
    frame = encode_frame({"op": "ping", "pad": "y" * 100})
    a.sendall(frame[:-10])
    a.close()
    with pytest.raises(ProtocolError, match="truncated") as info:
        read_frame(b)
    assert info.value.code == BAD_FRAME


def test_truncated_header_is_a_protocol_error(pair):
    a, b = pair
    a.sendall(b"\x00\x00")
    a.close()
    with pytest.raises(ProtocolError, match="truncated"):
        read_frame(b)


def test_eof_before_any_byte_is_none(pair):
    a, b = pair
    a.close()
    assert read_frame(b) is None


def test_read_frame_deadline_bounds_the_whole_frame(pair):
    a, b = pair
    a.sendall(encode_frame({"x": 1})[:3])  # a peer that stalls mid-header
    with pytest.raises(TimeoutError):  # not a wait for the rest, which never comes
        read_frame(b, deadline=time.monotonic() + 0.2)


@pytest.mark.parametrize("body", [
    msgpack.packb([1, 2, 3]),
    msgpack.packb("a string"),
    msgpack.packb(None),
    b"\xc1",  # never-used msgpack type byte
    b"",
    msgpack.packb({"a": 1}) + b"\x01",  # trailing bytes after the map
])
def test_decode_body_rejects_anything_but_one_map(body):
    with pytest.raises(ProtocolError):
        decode_body(body)


def test_decode_body_accepts_non_str_keys():
    assert decode_body(msgpack.packb({1: "a"})) == {1: "a"}


def test_zero_length_frame_is_a_protocol_error(pair):
    a, b = pair
    a.sendall((0).to_bytes(4, "big"))
    with pytest.raises(ProtocolError):
        read_frame(b)


# -- validate_id / validate_int ---------------------------------------------------------------


@pytest.mark.parametrize("value", [
    "run-1", "node_2", "a.b", "claude-121f3d32-3ec5-4127-ae30-79f10d3c7cee",
    "x" * 200, "é" * 100, "with space", "UPPER", ".x", "x.",
])
def test_validate_id_accepts(value):
    assert validate_id("run_id", value) == value


@pytest.mark.parametrize("value,rule", [
    ("../x", "must not contain '/'"),
    ("..", "'..'"),
    ("a..b", "'..'"),
    ("a/b", "'/'"),
    ("a\\b", "must not contain '\\\\'"),
    (".", "'.'"),
    ("nul\x00byte", "control characters"),
    ("tab\tchar", "control characters"),
    ("new\nline", "control characters"),
    ("del\x7f", "control characters"),
    ("esc\x1b[0m", "control characters"),
    ("x" * 10_000, "over the 200-byte limit"),
    ("x" * 201, "over the 200-byte limit"),
    ("é" * 101, "over the 200-byte limit"),
    ("\udc80", "not valid Unicode"),
    ("", "must not be empty"),
])
def test_validate_id_rejects(value, rule):
    with pytest.raises(ValueError) as info:
        validate_id("node_id", value)
    message = str(info.value)
    assert message.startswith("node_id")
    assert rule in message


@pytest.mark.parametrize("value", [None, 3, b"bytes", ["a"], 1.5, True])
def test_validate_id_rejects_non_str(value):
    with pytest.raises(ValueError, match="run_id must be a string"):
        validate_id("run_id", value)


def test_validate_id_message_of_a_huge_value_stays_short():
    with pytest.raises(ValueError) as info:
        validate_id("run_id", "/" + "x" * 10_000)
    assert len(str(info.value)) < 200


@pytest.mark.parametrize("kind,value,minimum", [
    ("iteration", 0, 0), ("iteration", 5, 0), ("attempt", 1, 1), ("attempt", 2**63 - 1, 1),
])
def test_validate_int_accepts(kind, value, minimum):
    assert validate_int(kind, value, minimum) == value


@pytest.mark.parametrize("kind,value,minimum,rule", [
    ("iteration", -1, 0, ">= 0"),
    ("attempt", 0, 1, ">= 1"),
    ("attempt", True, 1, "integer"),
    ("iteration", False, 0, "integer"),
    ("attempt", "1", 1, "integer"),
    ("attempt", 1.0, 1, "integer"),
    ("attempt", None, 1, "integer"),
    ("iteration", 2**63, 0, "<="),
])
def test_validate_int_rejects(kind, value, minimum, rule):
    with pytest.raises(ValueError, match=rule) as info:
        validate_int(kind, value, minimum)
    assert str(info.value).startswith(kind)
