"""The daemon process: the socket and its server, workers, the HTTP hook, activation,
supervisor messages, status figures, FIFO guards and start-up order."""

from snapshotd.faces import face

FACE: dict[str, tuple[str, ...]] = {
    "activation": ("listen_fds",),
    "daemon": ("prepare_home", "run_daemon", "setup_logging"),
    "fifo_guard": ("guarding",),
    "http_hook": ("HEADER_ENV", "HOOK_PATH", "TokenError", "ensure_token"),
    "native_hook": ("BuildError", "build", "python_hook"),
}
__all__, __getattr__, __dir__ = face(__name__, FACE)
