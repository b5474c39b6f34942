"""The base every layer stands on: keys, errors, configuration, fault seams, durable writes,
secrets detection and the reading of a user's repository. Imports nothing else of snapshotd."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "checkpoint": ("Checkpoint", "DEFAULT_TIER", "SEQ", "TrailerError", "Trailers",
        "parse_trailers", "squash_message", "without_findings"),
    "config": ("Config", "ConfigError", "ENV_VARS", "RedactingFilter", "config_path", "load_config",
        "parse_duration", "parse_size", "redact_text", "redact_url"),
    "durable": ("GIT_FSYNC_ARGS", "boot_id", "fsync_path", "make_dirs", "sync_dirs",
        "sync_object_dirs", "sync_tree", "write_all", "write_file", "write_new"),
    "errors": ("BAD_FRAME", "BAD_REQUEST", "BUSY", "CAPTURE_FAILED", "CONFLICT", "FENCED",
        "FETCH_FAILED", "FORBIDDEN", "FRAME_TOO_LARGE", "INTERNAL", "NOT_FOUND", "NO_REMOTE",
        "PUSH_FAILED", "RESTORE_FAILED", "SECRET_HELD", "SHUTTING_DOWN", "ServiceError",
        "UNKNOWN_OP", "UNSUPPORTED_VERSION", "VERIFY_FAILED", "WORKTREE_MISSING",
        "WORKTREE_REFUSED", "WORKTREE_REPLACED", "abs_path_field", "bool_field", "id_field",
        "int_field", "int_value", "opt_id_field", "opt_int_field"),
    "faults": ("check_fault", "crash_point", "injected_delay", "stop_limit_s"),
    "fswalk": ("files_under",),
    "git_cmd": ("last_lines", "run_git"),
    "home_lock": ("DaemonLockError", "HomeLock"),
    "home_perms": ("secure_home",),
    "keys": ("AttemptKey", "OLD_SUFFIX", "REF_PREFIX", "SPARE_SUFFIX", "is_spare", "worktree_id"),
    "registry": ("Handler", "LAYERS", "Registry", "Wrapper"),
    "secrets": ("cut_line", "finding_text", "may_name_secret_files", "name_findings", "redact_secrets",
        "redacted_line",
        "scan_changed_file", "scan_paths", "worktree_findings",
        "secret_files_among", "secret_skip"),
    "user_modes": ("DEFAULT_UMASK", "process_umask", "repo_mode", "share_paths",
        "shared_setting", "umask_field", "worktree_dir_mode", "worktree_file_mode"),
    "user_repo": ("CacheNode", "NotRegularFile", "SeedIndex", "blocking_file", "common_dir",
        "head_commit", "not_regular", "objects_dir", "open_regular", "open_user_repo",
        "read_regular", "repo_info_exclude", "strip_index", "user_gitdir", "user_head"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
