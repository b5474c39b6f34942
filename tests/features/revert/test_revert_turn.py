"""``revert --turn N`` (issues 44 and 45): undo everything the tool calls of one prompt's turn
changed, keeping the turns before it and a person's edit made since; a turn that does not exist
is ``not-found`` and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

from tests.conftest import QUIET_WATCHER, Env, MakeDaemon, make_git_worktree
from tests.features.test_sessions import cli
from tests.features.test_turns import RUN, tree_of, two_turns


def test_revert_of_a_turn_undoes_its_tool_calls_and_keeps_the_rest(
        sd_env: Env, make_daemon: MakeDaemon, tmp_path: Path) -> None:
    make_daemon(sd_env, QUIET_WATCHER)
    wt = make_git_worktree(tmp_path / "proj")
    (wt / "README").write_text("base\n")
    end_of_turn_1 = two_turns(sd_env, wt, "make it say world and add extra")
    # A person's edit after the session: not the turn's, so it stays.
    (wt / "notes.txt").write_text("notes\nmine\n")
    after_edit = tree_of(wt)

    missing = cli(sd_env, "revert", RUN, "--node", "session", "--turn", "3", "--force")
    assert missing.returncode != 0 and "no turn 3" in missing.stderr
    assert tree_of(wt) == after_edit

    proc = cli(sd_env, "revert", RUN, "--node", "session", "--turn", "2", "--force", "--json")
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["applied"] is True
    assert (wt / "greeting.txt").read_text() == "hello\n"
    assert not (wt / "extra.txt").exists()
    assert (wt / "notes.txt").read_text() == "notes\nmine\n"
    # The tree is the end of turn 1 with the person's edit on top (git as the oracle).
    (wt / "notes.txt").write_text("notes\n")
    assert tree_of(wt) == end_of_turn_1
