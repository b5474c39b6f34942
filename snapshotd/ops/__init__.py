"""The one operations surface the front ends (CLI, MCP, UI) call: each op through the daemon
when one answers, else on the home directly."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "backend": ("DaemonSilent", "NoLedger", "read_home", "run_op"),
    "operations": ("DEFAULT_PATCH_BYTES", "DEFAULT_PLAN_LIMIT", "Operations"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
