"""Which tests run on which ledger backend (``tests/conftest.py``: ``--ledgers``,
``ONE_LEDGER``, ``--all-ledgers``): a daemon test runs once per backend unless ``ONE_LEDGER``
names its module or itself, and every name there still names a test, so a renamed module or
test cannot silently turn its second backend off (or keep a stale entry).

The parametrization is checked on a throwaway suite (this directory's conftest with three small
test modules) collected by a real pytest subprocess."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import ONE_LEDGER, one_ledger_reason
from tests.support.helpers import throwaway_suite

TESTS = Path(__file__).resolve().parents[1]

SMALL_SUITE = {
    # "test_watcher" is in ONE_LEDGER; "test_plain" is not; "test_own_pg" names pg_url.
    "test_watcher.py": "def test_tree(sd_env):\n    pass\n",
    "test_plain.py": "def test_rows(sd_env):\n    pass\n\n\ndef test_no_env():\n    pass\n",
    "test_own_pg.py": "def test_pg(sd_env, pg_url):\n    pass\n",
}


def test_every_one_ledger_entry_names_an_existing_test() -> None:
    stale = []
    for entry in ONE_LEDGER:
        module, _, function = entry.partition("::")
        path = next(TESTS.rglob(f"{module}.py"), TESTS / f"{module}.py")
        if not path.is_file():
            stale.append(f"{entry}: no {path.name}")
            continue
        if function and function not in _test_functions(path):
            stale.append(f"{entry}: {path.name} has no {function}")
    assert stale == []


def test_one_ledger_reason_reads_modules_and_single_tests() -> None:
    assert one_ledger_reason("test_watcher", "test_anything") == ONE_LEDGER["test_watcher"]
    assert one_ledger_reason("tests.test_watcher", "test_anything") == ONE_LEDGER["test_watcher"]
    single = next(k for k in ONE_LEDGER if "::" in k)
    module, _, function = single.partition("::")
    assert one_ledger_reason(module, function) == ONE_LEDGER[single]
    assert one_ledger_reason(module, "test_not_listed_here") == ONE_LEDGER.get(module, "")
    assert one_ledger_reason("test_capture", "test_anything") == ""


@pytest.mark.parametrize(("args", "expected"), [
    ([], {"test_watcher.py::test_tree[sqlite]",
          "test_plain.py::test_rows[sqlite]", "test_plain.py::test_rows[postgres]",
          "test_plain.py::test_no_env",
          "test_own_pg.py::test_pg[postgres]"}),
    (["--all-ledgers"], {"test_watcher.py::test_tree[sqlite]", "test_watcher.py::test_tree[postgres]",
                         "test_plain.py::test_rows[sqlite]", "test_plain.py::test_rows[postgres]",
                         "test_plain.py::test_no_env",
                         "test_own_pg.py::test_pg[postgres]"}),
    (["--ledgers", "postgres"], {"test_watcher.py::test_tree[postgres]",
                                 "test_plain.py::test_rows[postgres]",
                                 "test_plain.py::test_no_env",
                                 "test_own_pg.py::test_pg[postgres]"}),
], ids=["default", "all-ledgers", "postgres-only"])
def test_the_suite_runs_each_test_on_the_backends_it_needs(
        tmp_path: Path, args: list[str], expected: set[str]) -> None:
    suite = throwaway_suite(tmp_path / "suite")
    for name, text in SMALL_SUITE.items():
        (suite / name).write_text(textwrap.dedent(text))
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
         "-p", "no:xdist", "-p", "no:randomly", *args, *SMALL_SUITE],
        cwd=suite, capture_output=True, text=True, timeout=120,
        env={k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_TEST_")})
    assert result.returncode == 0, result.stdout + result.stderr
    collected = {line for line in result.stdout.splitlines() if "::" in line}
    assert collected == expected


def _test_functions(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {node.name for node in ast.walk(tree)
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
            and node.name.startswith("test_")}
