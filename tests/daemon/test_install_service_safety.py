"""``install-service`` writes units that say exactly what the installing shell meant: a newline
(or another control character) in a carried value is refused, never turned into lines of the
unit; ``%`` in a path is escaped (``%%``, systemd's specifier syntax, checked by
``systemd-analyze verify`` where it is installed); and a unit someone edited since
``install-service`` wrote it is not overwritten without ``--force``, which keeps a copy."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import Env

pytestmark = pytest.mark.one_ledger("unit files, not the ledger")


def cli(env: Env, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=60)


def _install(env: Env, config_home: Path, *args: str, **extra: str):
    return cli(env, "install-service", "--no-start", "--platform", "linux", *args,
               XDG_CONFIG_HOME=str(config_home), **extra)


@pytest.mark.parametrize("variable", ["SNAPSHOTD_HOME", "SNAPSHOTD_SOCKET", "SNAPSHOTD_GAPS"])
def test_a_newline_in_a_carried_value_is_refused(sd_env: Env, tmp_path: Path,
                                                 variable: str) -> None:
    config_home = tmp_path / "cfg"
    value = str(tmp_path / "x\nExecStartPre=/bin/sh -c evil")
    for mode in ("--print", "--no-start"):
        out = cli(sd_env, "install-service", mode, "--platform", "linux",
                  XDG_CONFIG_HOME=str(config_home), **{variable: value})
        assert out.returncode == 1, out.stdout
        assert variable in out.stderr and "control character" in out.stderr, out.stderr
        assert "ExecStartPre" not in out.stdout
    assert not config_home.exists()


def test_percent_in_paths_is_escaped(sd_env: Env, tmp_path: Path) -> None:
    config_home = tmp_path / "cfg"
    sock = sd_env.sockdir / "a%Qb.sock"
    home = tmp_path / "home%Q"
    out = _install(sd_env, config_home, SNAPSHOTD_SOCKET=str(sock), SNAPSHOTD_HOME=str(home))
    assert out.returncode == 0, out.stderr
    unit_dir = config_home / "systemd" / "user"
    socket_unit = (unit_dir / "snapshotd.socket").read_text()
    assert f"ListenStream={str(sock).replace('%', '%%')}\n" in socket_unit
    assert str(home).replace("%", "%%") in (unit_dir / "snapshotd.service").read_text()
    if shutil.which("systemd-analyze") is None:
        return
    runtime = tmp_path / "runtime"
    runtime.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SNAPSHOTD_")}
    env["XDG_RUNTIME_DIR"] = str(runtime)
    verify = subprocess.run(["systemd-analyze", "verify", "--user",
                             str(unit_dir / "snapshotd.service"),
                             str(unit_dir / "snapshotd.socket")],
                            env=env, capture_output=True, text=True, timeout=120, cwd=unit_dir)
    # An unescaped %Q is an unknown specifier systemd refuses.
    assert "specifier" not in verify.stderr.lower(), verify.stderr


def test_an_edited_unit_is_kept_unless_force(sd_env: Env, tmp_path: Path) -> None:
    config_home = tmp_path / "cfg"
    assert _install(sd_env, config_home).returncode == 0
    unit = config_home / "systemd" / "user" / "snapshotd.service"
    again = _install(sd_env, config_home)  # unchanged since written: replaced quietly
    assert again.returncode == 0, again.stderr
    edited = unit.read_text() + "# my own tuning\nNice=5\n"
    unit.write_text(edited)
    refused = _install(sd_env, config_home)
    assert refused.returncode == 1 and str(unit) in refused.stderr
    assert "--force" in refused.stderr
    assert unit.read_text() == edited
    forced = _install(sd_env, config_home, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "Nice=5" not in unit.read_text()
    backups = [p for p in unit.parent.iterdir() if p.name.startswith("snapshotd.service.bak")]
    assert len(backups) == 1 and backups[0].read_text() == edited
    assert str(backups[0]) in forced.stdout
