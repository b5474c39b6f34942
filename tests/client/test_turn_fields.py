"""What a prompt's payload tells of its turn (``snapshotd_client.lifecycle.turn_fields``), for
each agent's real prompt payload in tests/fixtures: the first line, the session id, the
agent's turn id where it has one (Codex ``turn_id``, Qwen ``prompt_id``), the transcript and
its size when the file exists (docs/agents.md, "Turns: which agents give them")."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshotd_client.hook import SESSION_EVENTS, route
from snapshotd_client.lifecycle import PROMPT_SENT_MAX, turn_fields
from tests.conftest import load_payloads

PROMPTS = {"claude-code": None, "codex": "turn_id", "gemini": None, "qwen": "prompt_id",
           "copilot": None, "cursor": None}


def prompt_payload(agent: str) -> dict:
    for raw in load_payloads(f"{agent}/session-lifecycle.ndjson"):
        payload, kind = route(dict(raw))
        if kind == "session" and SESSION_EVENTS[payload["hook_event_name"]] == "working" \
                and payload.get("prompt"):
            return payload
    raise AssertionError(f"no prompt event in {agent}'s fixtures")


@pytest.mark.parametrize("agent", sorted(PROMPTS))
def test_each_agents_prompt_gives_its_turn_fields(agent: str, tmp_path: Path) -> None:
    payload = prompt_payload(agent)
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"uuid": "a"}\n')
    fields = turn_fields({**payload, "transcript_path": str(transcript)})
    assert fields["prompt"] == payload["prompt"].splitlines()[0]
    assert fields["session_id"] == payload["session_id"]
    assert fields["transcript_pos"] == transcript.stat().st_size
    if PROMPTS[agent]:
        assert fields["agent_turn_id"] == payload[PROMPTS[agent]]
    else:
        assert "agent_turn_id" not in fields


def test_a_long_or_missing_prompt_and_a_missing_transcript() -> None:
    payload = prompt_payload("claude-code")
    fields = turn_fields({**payload, "prompt": "\n\n  " + "x" * 5000 + "\nsecond",
                          "transcript_path": "/nonexistent/t.jsonl"})
    assert fields["prompt"] == "x" * PROMPT_SENT_MAX
    assert fields["transcript_path"] == "/nonexistent/t.jsonl"
    assert "transcript_pos" not in fields
    assert "prompt" not in turn_fields({k: v for k, v in payload.items() if k != "prompt"})
