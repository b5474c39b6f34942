"""Which tests run on which ledger backend (``tests/conftest.py``: ``--ledgers``, the
``one_ledger`` mark, ``--all-ledgers``): a daemon test runs once per backend unless its module
(``pytestmark``) or the test itself carries ``pytest.mark.one_ledger("why")``. The mark lives
with the test, so a renamed module or test keeps it, and a mark without a reason is an error.

The parametrization is checked on a throwaway suite (this suite's conftest with a few small
test modules) collected by a real pytest subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support.helpers import throwaway_suite

SMALL_SUITE = {
    # test_watcher's module is marked one_ledger; test_plain's test_file is marked alone;
    # test_plain's other tests are not; test_own_pg names pg_url.
    "test_watcher.py": """
        import pytest

        pytestmark = pytest.mark.one_ledger("a tree")


        def test_tree(sd_env):
            pass
    """,
    "test_plain.py": """
        import pytest


        def test_rows(sd_env):
            pass


        def test_no_env():
            pass


        @pytest.mark.one_ledger("a file")
        def test_file(sd_env):
            pass
    """,
    "test_own_pg.py": """
        def test_pg(sd_env, pg_url):
            pass
    """,
}


def collect(tmp_path: Path, modules: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``pytest --collect-only -q ARGS`` on ``modules`` beside a copy of this suite's conftest."""
    suite = throwaway_suite(tmp_path / "suite")
    for name, text in modules.items():
        (suite / name).write_text(textwrap.dedent(text))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-p", "no:randomly", *args, *modules],
        cwd=suite, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_TEST_")})


@pytest.mark.parametrize(("args", "expected"), [
    ([], {"test_watcher.py::test_tree[sqlite]",
          "test_plain.py::test_rows[sqlite]", "test_plain.py::test_rows[postgres]",
          "test_plain.py::test_no_env", "test_plain.py::test_file[sqlite]",
          "test_own_pg.py::test_pg[postgres]"}),
    (["--all-ledgers"], {"test_watcher.py::test_tree[sqlite]", "test_watcher.py::test_tree[postgres]",
                         "test_plain.py::test_rows[sqlite]", "test_plain.py::test_rows[postgres]",
                         "test_plain.py::test_no_env",
                         "test_plain.py::test_file[sqlite]", "test_plain.py::test_file[postgres]",
                         "test_own_pg.py::test_pg[postgres]"}),
    (["--ledgers", "postgres"], {"test_watcher.py::test_tree[postgres]",
                                 "test_plain.py::test_rows[postgres]",
                                 "test_plain.py::test_no_env",
                                 "test_plain.py::test_file[postgres]",
                                 "test_own_pg.py::test_pg[postgres]"}),
], ids=["default", "all-ledgers", "postgres-only"])
def test_the_suite_runs_each_test_on_the_backends_it_needs(
        tmp_path: Path, args: list[str], expected: set[str]) -> None:
    result = collect(tmp_path, SMALL_SUITE, *args)
    assert result.returncode == 0, result.stdout + result.stderr
    collected = {line for line in result.stdout.splitlines() if "::" in line}
    assert collected == expected


@pytest.mark.parametrize("mark", ["pytest.mark.one_ledger", "pytest.mark.one_ledger()",
                                  'pytest.mark.one_ledger("")',
                                  'pytest.mark.one_ledger("a", "b")'],
                         ids=["bare", "no-reason", "empty-reason", "two-reasons"])
def test_a_one_ledger_mark_without_one_reason_is_an_error(tmp_path: Path, mark: str) -> None:
    module = f"""
        import pytest


        @{mark}
        def test_tree(sd_env):
            pass
    """
    result = collect(tmp_path, {"test_unexplained.py": module})
    out = result.stdout + result.stderr
    assert result.returncode != 0, out
    assert "one_ledger takes one reason" in out, out
    assert "test_tree[" not in result.stdout, out
