"""A package's face: the names its ``__init__`` exports, each loaded from its module when used.

Every package of snapshotd opens with one table (module -> the public names it gives the package)
passed to ``face``. Code in another package imports those names through the package
(``from snapshotd.store import Store``), never a module inside it, so a package may rearrange
its modules without breaking its callers (tests/test_boundaries.py enforces it and reads the same
tables to follow an import to the module that defines the name).

Promises: a name is imported on first use only (PEP 562), so a command, the FIFO guard's process
or a test pays for the modules it touches, not for the whole package; an unknown name is an
``AttributeError`` naming the package, as for any module.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def face(package: str, table: Mapping[str, tuple[str, ...]]
         ) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """``(__all__, __getattr__, __dir__)`` for ``package`` exporting ``table``'s names."""
    home = {name: module for module, names in table.items() for name in names}
    if len(home) != sum(len(names) for names in table.values()):
        raise ValueError(f"{package}: a name is exported by two of its modules")

    def load(name: str) -> object:
        module = home.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        # Kept on the package: the next use is a plain attribute read.
        setattr(sys.modules[package], name, value)
        return value

    def names() -> list[str]:
        return sorted(set(home) | set(vars(sys.modules[package])))

    return sorted(home), load, names
