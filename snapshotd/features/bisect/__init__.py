"""Bisect: which checkpoint of an attempt first fails a command, run in one scratch directory
moved by diffs; and read-only checkouts of any checkpoint."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "bisect": ("Progress", "bisect_attempt", "plan_bisect"),
    "checkout": ("checkout_checkpoint",),
    "runner": ("Outcome", "run_command"),
    "scratch": ("CHECKOUT_MODES", "Modes", "ScratchTree", "remove_tree", "writable_modes"),
    "search": ("Search",),
    "treediff": ("diff_stat",),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
