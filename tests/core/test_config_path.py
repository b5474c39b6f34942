"""A config path that is not a regular file is said for what it is, never taken for "no config"
and never read when reading could block: a FIFO (no writer: an ``open`` would wait forever),
``/dev/zero`` (a read would never end), a directory, a symlink that leads nowhere. A symlink to
a regular file is followed; a missing file still means the defaults."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.config import ConfigError, load_config
from tests.conftest import Env


def _config_cli(tmp_path: Path, config: Path) -> subprocess.CompletedProcess:
    env = Env(tmp_path)
    return subprocess.run([sys.executable, "-m", "snapshotd", "config"],
                          env=env.environ(SNAPSHOTD_CONFIG=str(config)), capture_output=True,
                          text=True, timeout=60)


@pytest.mark.parametrize("kind", ["fifo", "dev-zero", "directory", "dangling-symlink"])
def test_a_config_path_that_is_no_regular_file_is_named(tmp_path: Path, kind: str) -> None:
    path = tmp_path / "config.toml"
    if kind == "fifo":
        os.mkfifo(path)
        said = "is a FIFO, not a regular file"
    elif kind == "dev-zero":
        path = Path("/dev/zero")
        said = "is a character device, not a regular file"
    elif kind == "directory":
        path.mkdir()
        said = "is a directory, not a regular file"
    else:
        path.symlink_to(tmp_path / "gone.toml")
        said = "symbolic link"
    with pytest.raises(ConfigError, match=said) as caught:
        load_config(environ={}, path=path)
    assert str(path) in str(caught.value)
    out = _config_cli(tmp_path, path)  # would hang on the FIFO if it were opened
    assert out.returncode == 2 and said in out.stderr and str(path) in out.stderr, out.stderr


def test_a_symlink_to_a_file_is_read_and_a_missing_file_is_the_defaults(tmp_path: Path) -> None:
    real = tmp_path / "real.toml"
    real.write_text("settle_ms = 321\n")
    link = tmp_path / "config.toml"
    link.symlink_to(real)
    assert load_config(environ={}, path=link).settle_ms == 321
    assert load_config(environ={}, path=tmp_path / "absent.toml").settle_ms == 200
