"""snapshotd's thin client (import name ``snapshotd_client``): stdlib + msgpack only.

Owns everything an agent process needs to talk to the daemon: the wire format
(``snapshotd_client.protocol``), the connection (``Client``), the in-process tool wrapper
(``wrap``), the gap spool (``snapshotd_client.gaps``) and the CLI agents' after-tool hook
(``snapshotd_client.hook``, the ``snapshot-hook`` console script).

Promises: never imports the daemon, click, pygit2, watchfiles or psutil, so the hook, which
runs after every tool call, loads in a few milliseconds.
"""

from .client import Client, DaemonTimeout, DaemonUnavailable, SnapshotdError
from .wrap import wrap

__version__ = "0.1.0"

__all__ = ["Client", "DaemonTimeout", "DaemonUnavailable", "SnapshotdError", "__version__", "wrap"]
