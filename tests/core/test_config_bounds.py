"""Every numeric setting is bounded: a value past its range (``settle_ms = 1e308``, a 30-digit
integer, a negative number, a fraction where a whole number is meant) is a ``ConfigError``
naming the key, the value and the range, from the config file and from the environment alike;
a daemon whose every numeric setting is at its maximum still starts and answers ``status``
(``settle_ms = 1e308`` once made every ``status`` fail for the daemon's life)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.config import BOUNDS, ENV_VARS, ConfigError, load_config
from tests.conftest import Env

NUMERIC = sorted(BOUNDS)


def _toml(value: object) -> str:
    return repr(value) if not isinstance(value, str) else f'"{value}"'


@pytest.mark.parametrize("key", NUMERIC)
def test_past_the_maximum_is_refused_naming_key_value_and_range(key: str,
                                                                tmp_path: Path) -> None:
    low, high = BOUNDS[key]
    path = tmp_path / "config.toml"
    for value in (1e308, 10 ** 30, high * 2 + 1):
        path.write_text(f"{key} = {_toml(value)}\n")
        with pytest.raises(ConfigError) as caught:
            load_config(environ={}, path=path)
        message = str(caught.value)
        assert key in message and str(int(high)) in message and "between" in message, message
    with pytest.raises(ConfigError, match=key):
        load_config(environ={ENV_VARS[key]: str(10 ** 30)}, path=tmp_path / "none.toml")
    with pytest.raises(ConfigError, match=key):
        load_config(environ={ENV_VARS[key]: "-1"}, path=tmp_path / "none.toml")


@pytest.mark.parametrize("key", [k for k in NUMERIC if isinstance(BOUNDS[k][1], int)])
def test_a_fraction_is_not_a_whole_number(key: str, tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text(f"{key} = 1000.5\n")
    with pytest.raises(ConfigError, match=f"{key}.*whole number"):
        load_config(environ={}, path=path)


def test_the_bounds_themselves_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    for key in NUMERIC:
        low, high = BOUNDS[key]
        for value in (low, high) if low > 0 or key in ("linger_s",) else (high,):
            path.write_text(f"{key} = {_toml(value)}\n")
            assert getattr(load_config(environ={}, path=path), key) == value


def test_the_cli_says_which_key(tmp_path: Path) -> None:
    env = Env(tmp_path)
    config = tmp_path / "config.toml"
    config.write_text("settle_ms = 1e308\n")
    out = subprocess.run([sys.executable, "-m", "snapshotd", "config"],
                         env=env.environ(SNAPSHOTD_CONFIG=str(config)), capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 2 and "settle_ms" in out.stderr and "between" in out.stderr


@pytest.mark.one_ledger("the status map's encoding, not the ledger")
def test_a_daemon_at_every_maximum_answers_status(sd_env: Env, make_daemon) -> None:
    config = sd_env.root / "max.toml"
    config.write_text("".join(f"{key} = {_toml(BOUNDS[key][1])}\n" for key in NUMERIC
                              if key != "http_hook_port"))
    daemon = make_daemon(sd_env, {"SNAPSHOTD_CONFIG": str(config)})
    with daemon.client() as c:
        status = c.status()
    assert status["config"]["settle_ms"] == BOUNDS["settle_ms"][1]
