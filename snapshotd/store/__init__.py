"""The store: the one bare git repository every checkpoint lives in, and the only code that
writes to it (objects, commits, attempt refs, recovery after a crash)."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "errors": ("FileChanging", "INODES_EXHAUSTED", "InvalidPath", "STORE_WRITE_FAILED",
        "SizeMismatch", "StoreError", "WRITE_FAILURE_MESSAGES", "changed_while_read",
        "disk_reason", "odb_retry", "refused_path"),
    "journal": ("read_journal", "write_journal"),
    "kept": ("KEPT_PREFIX", "KeptFile", "drop_kept", "keep_ignored", "kept_for", "kept_ref",
        "kept_seqs"),
    "lending": ("cache_git_env", "open_cache"),
    "object_import": ("import_objects",),
    "packing": ("PIN_PREFIX", "cruft_packs", "drop_cruft", "drop_pins", "loose_count",
        "object_counts", "pack_count", "pack_since", "pack_store", "pinned", "pin_tips",
        "ref_tips", "repack_cruft"),
    "read_trees": ("empty_tree", "pruned_pair"),
    "store": ("SIGNATURE_EMAIL", "SIGNATURE_NAME", "Store"),
    "trees": ("TreeShapeChanged", "graft_trees", "remember_changes", "remember_file_count",
        "rewrite_tree"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
