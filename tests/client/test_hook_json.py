"""snapshot-hook parses its payload with json's C scanner and without ``json`` (whose decoder
imports ``re``, milliseconds after every tool call): same values and same errors as
``json.loads``."""

from __future__ import annotations

import json
import subprocess
import sys
from random import Random

import pytest

from snapshotd_client.hook import parse_json


def random_value(rng: Random, depth: int = 0) -> object:
    roll = rng.random()
    if depth > 3 or roll < 0.3:
        return rng.choice([None, True, False, rng.randint(-10**20, 10**20),
                           rng.random() * 10 ** rng.randint(-6, 6),
                           "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(0, 8)))])
    if roll < 0.65:
        return [random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {"".join(chr(rng.randint(32, 0x2FFF)) for _ in range(rng.randint(0, 5))):
            random_value(rng, depth + 1) for _ in range(rng.randint(0, 4))}


def test_values_equal_json_loads() -> None:
    rng = Random(8)
    for _ in range(500):
        doc = json.dumps(random_value(rng), ensure_ascii=rng.random() < 0.5,
                         indent=rng.choice([None, 1]))
        raw = (rng.choice(["", " ", "\n\t"]) + doc + rng.choice(["", " ", "\r\n"])).encode()
        assert parse_json(raw) == json.loads(raw)


@pytest.mark.parametrize("raw", [
    b"", b" ", b'{"a":1} x', b'{"a":1}{}', b'\xef\xbb\xbf{"a":1}', b'{"a":NaN}',
    b"[Infinity,-Infinity]", b'{"a":"\xff"}', '{"a":1}'.encode("utf-16"), b'{"a":"\x01"}',
    b"[1,]", b'{"a" 1}', b'"\\ud800"', b"1", b"nul", b"[" * 100_000,
])
def test_edge_cases_match_json_loads(raw: bytes) -> None:
    def outcome(parse):
        try:
            return "ok", repr(parse(raw))
        except Exception as exc:  # noqa: BLE001 - the error type is what is compared
            return "error", type(exc).__name__

    assert outcome(parse_json) == outcome(json.loads)


def test_a_payload_is_parsed_without_importing_json() -> None:
    code = ("import sys\n"
            "from snapshotd_client.hook import parse_json\n"
            "assert parse_json(b'{\"tool_name\": \"Write\", \"n\": [1, 2.5]}')['n'] == [1, 2.5]\n"
            "print('json' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
