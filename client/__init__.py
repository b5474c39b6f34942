"""snapshotd's thin client (import name ``snapshotd_client``): stdlib + msgpack only.

Owns everything an agent process needs to talk to the daemon: the wire format
(``snapshotd_client.protocol``), the connection (``Client``), the in-process tool wrapper
(``wrap``), the gap spool (``snapshotd_client.gaps``) and the CLI agents' after-tool hook
(``snapshotd_client.hook``, the ``snapshot-hook`` console script).

Promises: never imports the daemon, click, pygit2, watchfiles or psutil, so the hook, which
runs after every tool call, loads in a few milliseconds.
"""

from __future__ import annotations

__version__ = "0.1.0"

_LAZY = {"Client": "client", "DaemonTimeout": "client", "DaemonUnavailable": "client",
         "SnapshotdError": "client", "wrap": "wrap"}


def __getattr__(name: str) -> object:
    # Lazy (PEP 562): ``snapshot-hook`` imports ``snapshotd_client.hook`` after every tool call
    # and must not pay for the wrapper's imports.
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'snapshotd_client' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value

__all__ = ["Client", "DaemonTimeout", "DaemonUnavailable", "SnapshotdError", "__version__", "wrap"]
