"""``python -m snapshotd``: the same as the ``snapshotd`` command."""

from snapshotd.cli import main

if __name__ == "__main__":
    main()
