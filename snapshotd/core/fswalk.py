"""Walking a directory tree on disk the way the daemon measures one.

Owns ``files_under``: every non-directory entry below a root, depth-first, never following a
symbolic link. Promises: a directory that cannot be read (or vanishes meanwhile) yields nothing
and the walk goes on, so a count or a size is of what could be read; directories named in
``skip`` are not entered.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from pathlib import Path


def files_under(root: Path | str, skip: Collection[str] = ()) -> Iterator[os.DirEntry[str]]:
    """Every entry under ``root`` that is not a directory (files, links, special files)."""
    stack = [str(root)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue  # removed meanwhile
                    if not is_dir:
                        yield entry
                    elif entry.name not in skip:
                        stack.append(entry.path)
        except OSError:
            continue
