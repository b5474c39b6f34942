"""Review: diffs, history (show, log, find), blame, export and the captures before tool
calls."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "blame": ("attribute", "blame_checkpoint", "blame_commit", "outside_tool_call",
        "public_shape"),
    "diff": ("diff_checkpoints", "render_trees"),
    "export": ("export_fields",),
    "history": ("compare", "find_path", "log_run", "show_checkpoint"),
    "others": ("ForeignChanges",),
    "tool_call_change": ("show_tool_call",),
    "view": ("HomeView",),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
