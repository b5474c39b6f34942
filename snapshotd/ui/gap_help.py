"""What each gap reason means and what to do about it, for the web app's gap views.

Owns ``GAP_HELP`` (reason -> what happened, what to do) and ``help_for``. The README's
"Troubleshooting by gap reason" table says the same to readers of the README; a test checks
that every reason in that table has an entry here, so the two cannot drift apart silently.

Promises: ``help_for`` answers for any reason, known or not (an unknown one says to report it
with its detail).
"""

from __future__ import annotations

_UNAVAILABLE = ("the hook found no daemon on the socket (and auto-start did not bring one up)",
                "`snapshotd status`; install the service or run `snapshotd serve`; check that "
                "hook and daemon agree on `SNAPSHOTD_SOCKET`/`XDG_RUNTIME_DIR`")
_WORKTREE_GONE = ("the directory is gone, or was swapped for a symlink",
                  "expected when a worktree is deleted; otherwise check what removed or "
                  "replaced it")
_WRITE_FAILED = ("the tree could not be read or the store could not be written",
                 "disk full or I/O errors: `df` on the home; permissions of the files named in "
                 "the detail")
_COMMIT_FAILED = ("the commit, ref or ledger row could not be written",
                  "disk full or a damaged home; the daemon repairs a ref ahead of its row at "
                  "start-up")
_BAD_INPUT = ("the hook could not form a valid request (agent payload changed, bad ids in "
              "`SNAPSHOTD_*`)",
              "the detail names the field; check the agent version and the "
              "`SNAPSHOTD_RUN_ID`/`NODE_ID` you set")
_BUSY = ("the daemon's connection table was full (`max_connections`), or it was stopping",
         "expected during a restart; frequent `busy` gaps: raise `max_connections` or find the "
         "client that holds connections open (`connections` in `snapshotd status`)")

GAP_HELP: dict[str, tuple[str, str]] = {
    "daemon-unavailable": _UNAVAILABLE,
    "timeout": ("the daemon did not answer within the hook's budget",
                "look at `latency_ms` and `process` in `snapshotd status`; a first capture of a "
                "huge tree is slow, later ones are not; raise `SNAPSHOTD_HOOK_TIMEOUT_MS`"),
    "worktree-refused": ("the tree is `/`, your home, a pseudo filesystem, holds the snapshotd "
                         "home, or has more than `max_zero_setup_files` files as a zero-setup "
                         "worktree",
                         "start the agent in a project directory, or `snapshotd attempt begin` "
                         "for that directory, or raise `max_zero_setup_files`"),
    "worktree-missing": _WORKTREE_GONE,
    "worktree-replaced": _WORKTREE_GONE,
    "fenced": ("the capture named an attempt that was superseded, ended or abandoned",
               "expected after `attempt begin` replaced an attempt on the same worktree; a "
               "stale agent is still running"),
    "scan-failed": _WRITE_FAILED,
    "capture-failed": _WRITE_FAILED,
    "object-write-failed": _WRITE_FAILED,  # the older name of store-write-failed
    "store-write-failed": ("the store's disk refused a write (full, over quota, read-only, I/O "
                           "error); nothing was acknowledged",
                           "`df` on the home, free space (`snapshotd gc`); the next capture holds "
                           "every change made meanwhile"),
    "inodes-exhausted": ("the store's file system has no free inode left (it may have bytes to "
                         "spare); nothing was acknowledged",
                         "`df -i` on the home; delete files there (`snapshotd gc`) or move the "
                         "home to a file system with more inodes"),
    "file-vanished": ("files of the worktree kept being deleted while the capture read them, 5 "
                      "scans in a row",
                      "nothing is broken: the next capture after the churn holds the tree; "
                      "frequent ones: exclude the folder a tool keeps rewriting"),
    "attempt-damaged": ("the daemon found one attempt's ref broken, a commit of it gone, or its "
                        "rows unreadable; it repaired the ref onto the last checkpoint it still "
                        "holds and serves every other run as usual",
                        "`snapshotd snapshots RUN` shows what is gone (the detail names it); "
                        "check the disk (`dmesg`, `git fsck` on `<home>/store.git`)"),
    "checkpoint-lost": ("at start-up after a power cut (durability = \"process\"), rows naming "
                        "commits the store no longer has were dropped; their seqs are not reused",
                        "expected with `durability = \"process\"` after a power loss; use "
                        "`durability = \"full\"` where that matters (docs/durability.md)"),
    "commit-failed": _COMMIT_FAILED,
    "ledger-failed": _COMMIT_FAILED,
    "watch-failed": ("tier 2 could not watch the worktree (inotify watch limit, permission "
                     "denied); it falls back to a stat scan every `scan_interval_s`",
                     "raise `fs.inotify.max_user_watches` / `max_user_instances` (`sysctl`), or "
                     "fix permissions; the watcher retries by itself"),
    "watcher-drift": ("a verification scan found changes no event reported; that worktree's "
                      "captures use full stat scans for 5 minutes",
                      "nothing was lost (the scan captured it); frequent ones: raise "
                      "`fs.inotify.max_queued_events`, exclude build output folders"),
    "settle-window-missed": ("the daemon stopped while writes were waiting to settle",
                             "the state is captured at the next start; see why it stopped "
                             "(`journalctl --user -u snapshotd`)"),
    "bad-payload": _BAD_INPUT,
    "bad-request": _BAD_INPUT,
    "bad-id": _BAD_INPUT,
    "protocol-error": _BAD_INPUT,
    "busy": _BUSY,
    "shutting-down": _BUSY,
    "socket-untrusted": ("the socket's directory or file is not yours, or another user's "
                         "process listens on it; the hook sent nothing",
                         "someone may be impersonating snapshotd: remove the directory named in "
                         "the detail and restart snapshotd, or point `XDG_RUNTIME_DIR`/"
                         "`SNAPSHOTD_SOCKET` at a directory only you can write"),
    "internal": ("the hook or the daemon failed unexpectedly",
                 "report it with the detail (and the daemon's log)"),
}


def help_for(reason: object) -> dict[str, str]:
    """``{"happened": ..., "todo": ...}`` for a gap reason."""
    happened, todo = GAP_HELP.get(str(reason), (
        "a reason this version of snapshotd does not describe",
        "report it with the gap's detail (and the daemon's log)"))
    return {"happened": happened, "todo": todo}
