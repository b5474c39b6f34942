"""A user's pack copied whole into the store by a seed survives a power cut in full durability
(tests/support/powerfs.py keeps only what fsync made durable: data at fsync of the file, names at fsync
of their directory)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import powerfs
from tests.support.powercut import Rig, git_tree


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    reason = powerfs.unavailable()
    if reason:
        pytest.skip(reason)
    made = Rig(tmp_path / "rig", home_exists=True)
    yield made
    made.close()


def test_a_pack_copied_whole_survives_a_cut(rig: Rig, tmp_path: Path) -> None:
    wt = git_tree(tmp_path / "git", files=20)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    subprocess.run(["git", "gc", "-q"], cwd=wt, env=env, check=True)  # one pack, like a clone
    (pack,) = (wt / ".git" / "objects" / "pack").glob("*.pack")
    rig.start()
    rig.settle()
    attempt = rig.begin("r1", "git", wt)
    rig.capture(attempt)
    assert list(rig.home.glob(f"store.git/objects/pack/{pack.name}")), "not copied whole"
    rig.power_cut()
    problems = rig.problems()
    assert problems == [], "\n".join(problems) + "\n" + rig.log_tail()
    rig.capture_again(attempt)
    problems = rig.problems()
    assert problems == [], "\n".join(problems) + "\n" + rig.log_tail()
