"""The slow-first list (tests/support/slow_first.py) names tests that exist, and ordering by it
moves only those, keeping every other test where collection put it."""

from __future__ import annotations

from types import SimpleNamespace

from tests.conftest import REPO
from tests.support.slow_first import SLOW_FIRST, order, rank


def test_every_entry_names_a_test_that_exists() -> None:
    missing = []
    for entry in SLOW_FIRST:
        path, _, function = entry.partition("::")
        source = REPO / path
        if not source.is_file() or (function and f"def {function}(" not in source.read_text()):
            missing.append(entry)
    assert missing == [], "stale entries in tests/support/slow_first.py"


def test_the_slow_ones_go_first_by_rank_and_the_rest_keep_their_order() -> None:
    slow = ("tests/b.py::test_slowest", "tests/m.py")
    ids = ["tests/a.py::test_one", "tests/m.py::test_x[1]", "tests/b.py::test_quick",
           "tests/b.py::test_slowest[sqlite]", "tests/a.py::test_two", "tests/m.py::test_y",
           "tests/b.py::test_slowest[postgres]"]
    items = [SimpleNamespace(nodeid=i) for i in ids]
    order(items, slow)  # type: ignore[arg-type] - only .nodeid is read
    assert [i.nodeid for i in items] == [
        "tests/b.py::test_slowest[sqlite]", "tests/b.py::test_slowest[postgres]",
        "tests/m.py::test_x[1]", "tests/m.py::test_y",
        "tests/a.py::test_one", "tests/b.py::test_quick", "tests/a.py::test_two"]
    assert rank("tests/b.py::test_slowest_but_not[x]", slow) == len(slow)
