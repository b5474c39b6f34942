"""The suite's known-slow tests, started first so that three xdist workers do not end on a long
tail (one worker still in a 30 s test while the others sit idle): ``order`` moves them to the
front, longest first, and keeps every other test in collection order (so the module-scoped
fixtures of the rest are still set up once per worker). Nothing else depends on this list:
a test missing from it only starts later. Add a test here when ``--durations`` shows it near
the top (measured on the 2-core machine with the suite's ``-n 3``)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

# ``path::function`` (every parametrisation) or a whole module's path (keep a module whose tests
# share a module-scoped fixture whole), longest first.
SLOW_FIRST: tuple[str, ...] = (
    "tests/service/test_list_paging.py::test_a_long_run_lists_whole_in_pages",
    "tests/system/test_crash.py::test_crash_at_every_capture_boundary",
    "tests/system/test_powerloss.py::test_full_mode_loses_nothing_acknowledged_at_random_cut_points",
    "tests/features/test_gc_race.py::test_gc_with_zero_grace_never_removes_acknowledged_checkpoints",
    "tests/system/test_chaos.py::test_random_faults_break_no_invariant",
    "tests/watch/test_watch_routing.py::test_changes_a_verification_finds_unannounced_are_watcher_drift",
    "tests/ui/test_ui_browser.py",
    "tests/features/restore/test_restore.py::test_only_the_differing_file_is_touched",
    "tests/watch/test_watcher.py::test_files_in_new_nested_directories_all_reach_the_settled_checkpoint",
    "tests/system/test_powerloss.py::test_the_first_capture_of_a_plain_worktree_survives_a_cut",
    "tests/system/test_crash.py::test_restore_killed_half_way_then_rerun",
    "tests/system/test_rename_storm.py::test_no_checkpoint_under_a_rename_storm_is_torn_unmarked",
    "tests/watch/test_fastpath.py::test_fast_path_tier1_matches_a_full_capture_every_step",
    "tests/system/test_powerloss.py::test_a_wide_root_written_stored_survives_a_cut",
    "tests/ledger/test_ledger_backends.py::test_daemon_on_postgresql_hooks_listing_and_kill_9",
    "tests/store/test_fastpath_store.py::test_fast_path_matches_full_capture_every_step",
    "tests/watch/test_fastpath.py::"
    "test_a_kernel_queue_overflow_turns_the_next_capture_into_an_exact_full_scan",
    "tests/features/test_gc.py::test_captures_during_gc_are_never_lost",
    "tests/features/test_withhold.py::test_a_checkpoint_with_a_key_is_kept_marked_and_withheld",
    "tests/system/test_hostile_input.py::test_fuzzed_frames_never_hurt_the_daemon",
    "tests/system/test_fsck_holes.py::test_a_capture_during_the_store_check_is_no_hole",
    "tests/mcp/test_mcp.py::test_list_checkpoints_diff_and_restore_through_mcp",
    "tests/mcp/test_mcp.py::test_stdout_carries_nothing_but_the_protocol",
    "tests/service/test_listing.py::test_snapshots_default_all_and_filters",
    "tests/service/test_damage.py::test_one_damaged_attempt_does_not_stop_the_others",
    "tests/meta/test_ledger_matrix.py::test_the_suite_runs_each_test_on_the_backends_it_needs",
)


def rank(nodeid: str, slow: Sequence[str] = SLOW_FIRST) -> int:
    """The test's place in ``slow`` (``len(slow)`` when it is not there)."""
    path, _, rest = nodeid.partition("::")
    function = path + "::" + rest.split("[", 1)[0] if rest else path
    for i, entry in enumerate(slow):
        if entry == function or entry == path:
            return i
    return len(slow)


def order(items: list[pytest.Item], slow: Sequence[str] = SLOW_FIRST) -> None:
    """Reorder ``items`` in place: the slow ones first, by their rank; the rest after them in
    the order they had (a stable sort)."""
    items.sort(key=lambda item: rank(item.nodeid, slow))
