"""The client packs plain requests itself (so the hook can import msgpack while the daemon
captures): byte for byte what ``msgpack.packb(..., use_bin_type=True)`` produces, and nothing
for what it does not cover."""

from __future__ import annotations

import math
import subprocess
import sys
from random import Random

import msgpack

from snapshotd_client.protocol import decode_body, encode_frame, pack_plain

EDGES = [0, 1, 31, 32, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, 2**63 - 1, 2**63,
         2**64 - 1, -1, -31, -32, -33, -127, -128, -129, -32768, -32769, -2**31, -2**31 - 1,
         -2**63]
LENGTHS = [0, 1, 15, 16, 31, 32, 255, 256, 65535, 65536]


def text(rng: Random, long: bool) -> str:
    n = rng.choice(LENGTHS if long else LENGTHS[:7])
    chars = (chr(rng.choice([rng.randint(0x80, 0xD7FF), rng.randint(0xE000, 0x10FFFF)]))
             for _ in range(min(n, 8)))  # no lone surrogates: those are not text
    return "".join(chars) + "x" * max(0, n - 8)


def plain(rng: Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 2 or roll < 0.5:
        return rng.choice([
            None, True, False, rng.choice(EDGES) + rng.choice([0, 1, -1]),
            rng.randint(-10**6, 10**6), rng.choice([0.0, -0.0, 1.5, math.inf, 1e300]),
            text(rng, depth == 0), b"\0\xff" * (rng.choice(LENGTHS[:7]) // 2),
        ])
    if roll < 0.75:
        items = [plain(rng, depth + 1) for _ in range(rng.choice([0, 1, 2, 15, 16, 17]))]
        return tuple(items) if rng.random() < 0.3 else items
    return {rng.choice([f"k{i}" for i in range(40)] + [7, None, 2.5]): plain(rng, depth + 1)
            for _ in range(rng.choice([0, 1, 2, 15, 16, 17]))}


def test_plain_values_pack_exactly_as_msgpack() -> None:
    rng = Random(8)
    for _ in range(300):
        value = {"v": 1, "op": "snapshot", "x": plain(rng)}
        packed = pack_plain(value)
        if packed is None:  # an int past 64 bits: msgpack must refuse it too
            try:
                msgpack.packb(value, use_bin_type=True)
            except OverflowError:
                continue
            raise AssertionError(f"deferred a value msgpack packs: {value!r}")
        assert packed == msgpack.packb(value, use_bin_type=True), value
    nan = pack_plain({"a": math.nan})
    assert nan == msgpack.packb({"a": math.nan}, use_bin_type=True)


def test_what_it_does_not_cover_is_left_to_msgpack() -> None:
    class Text(str):
        pass

    for value in ({"a": Text("x")}, {"a": 2**64}, {"a": -2**63 - 1}, {"a": "\ud800"},
                  {"a": object()}, {"a": {1, 2}}, {"a": bytearray(b"x")}):
        assert pack_plain(value) is None
    deep: object = 1
    for _ in range(100):
        deep = [deep]
    assert pack_plain({"a": deep}) is None
    assert decode_body(encode_frame({"a": Text("x")})[4:]) == {"a": "x"}  # msgpack packed it


def test_a_request_is_sent_before_msgpack_is_imported() -> None:
    code = ("import sys\n"
            "from snapshotd_client.protocol import encode_frame\n"
            "frame = encode_frame({'v': 1, 'op': 'snapshot', 'cwd': '/w', 'tier': 1,\n"
            "                      'fallback': {'iteration': 0, 'attempt': None}})\n"
            "print('msgpack' in sys.modules, frame.hex())\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.split()
    assert out[0] == "False"
    frame = bytes.fromhex(out[1])
    assert msgpack.unpackb(frame[4:]) == {"v": 1, "op": "snapshot", "cwd": "/w", "tier": 1,
                                           "fallback": {"iteration": 0, "attempt": None}}


def test_once_msgpack_is_loaded_frames_are_the_same_bytes() -> None:
    """After the import (the daemon's case, and a client's from its first reply on)
    ``encode_frame`` uses msgpack's packer: the frames are those the plain packer made, and
    text that is not Unicode still goes as ``EXT_FS_TEXT``."""
    from snapshotd_client import protocol

    protocol.preload_codec()
    assert protocol._MSGPACK is msgpack  # the path under test
    rng = Random(9)
    for _ in range(200):
        value = {"v": 1, "op": "snapshot", "x": plain(rng)}
        packed = pack_plain(value)
        if packed is not None:
            assert encode_frame(value) == len(packed).to_bytes(4, "big") + packed, value
    frame = encode_frame({"path": "caf\udce9"})
    assert decode_body(frame[4:], fs_text=True) == {"path": "caf\udce9"}
    # As the daemon reads it: an ext value of the name's bytes, not lossy text.
    assert decode_body(frame[4:]) == {"path": msgpack.ExtType(protocol.EXT_FS_TEXT, b"caf\xe9")}
