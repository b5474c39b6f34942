"""Daemon configuration: embedded defaults < config file < environment < command-line flags.

Owns reading ``$XDG_CONFIG_HOME/snapshotd/config.toml`` (override ``SNAPSHOTD_CONFIG``); the
redaction of anything that may echo a configured value: ``redact_url``, ``redact_text`` (which
also applies ``secrets.redact_secrets``) and ``RedactingFilter`` on the daemon's log handler,
the one way every surface shows or logs one (``Config.as_dict``, ``snapshotd config``,
``status``, replication, the ledger's location); and per-worktree settings: a
``[worktree."/abs/path"]`` table overrides ``WORKTREE_KEYS`` for that worktree and those below
it (most specific wins, paths realpath-compared), resolved only in ``Config.for_worktree`` and
read from the user's config file only, never from a worktree, which the captured agent can write.

Promises: every effective value knows where it came from (``Config.sources``); an unknown key or
a bad value is a ``ConfigError`` naming the key and what is accepted; no password, token or
``user:password@`` part of a URL leaves through ``as_dict``, ``repr`` or the redaction functions.
"""

from __future__ import annotations

import logging
import math
import os
import re
import stat
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path

from snapshotd.core.secrets import SECRET_FILE_MODES, redact_secrets

try:  # Python 3.11+
    import tomllib
except ModuleNotFoundError:  # pragma: no cover - Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

DURABILITY_MODES = ("process", "full")
# The settings a ``[worktree."/abs/path"]`` table may override for the worktrees under it.
WORKTREE_KEYS = ("secret_files", "secret_scan")
NOTIFIER_KINDS = ("auto", "inotify", "watchfiles")


class ConfigError(ValueError):
    """A configuration key or value that cannot be used."""


@dataclass
class Config:
    settle_ms: int = 200
    max_wait_ms: int = 2000
    max_file_bytes: int = 64 << 20
    excludes: tuple[str, ...] = ()
    hook_timeout_ms: int = 5000
    durability: str = "process"
    max_zero_setup_files: int = 200_000
    idle_timeout_s: float = 300.0
    max_connections: int = 1024
    scan_interval_s: float = 2.0
    verify_interval_s: float = 60.0
    # The share of a core that verifying quiet worktrees (no event for ten verify intervals) may
    # take, daemon-wide: they take turns, the longest unverified first (docs/watcher.md).
    quiet_verify_share: float = 0.0025
    # How long an ended attempt's worktree stays passively watched (0 = not at all).
    linger_s: float = 3600.0
    # How long an agent session's attempt with no owner process (none could be named) may go
    # without a capture before liveness ends it ``abandoned`` (docs/agents.md).
    ownerless_idle_s: float = 3600.0
    # Where the watcher's events come from: "auto" (inotify on Linux, else watchfiles),
    # "inotify" or "watchfiles".
    notifier: str = "auto"
    log_level: str = "info"
    gc_keep_last: int = 0
    gc_older_than: str = ""
    gc_max_store_size: str = ""
    store_size_warn: str = "50G"
    gc_interval_s: float = 3600.0
    # Automatic packing of the store (docs/durability.md, "Maintenance"): at least this often
    # while loose objects exist (0: not on a schedule), and as soon as this many objects are
    # loose (0: never for that); past this many packs they are consolidated into one.
    maintenance_interval_s: float = 900.0
    maintenance_loose_objects: int = 2000
    maintenance_pack_limit: int = 20
    # A byte budget for the home's store and the free space to leave on its disk: past either,
    # a warning (status ``disk``, the log) and the oldest ended runs go until both hold again
    # ("" = no budget / no floor; docs/durability.md, "The disk budget").
    store_budget: str = "20G"
    free_space_floor: str = "2G"
    # "" = SQLite at <home>/snapshotd.db; "postgresql://…" = a ledger shared by several hosts.
    ledger_url: str = ""
    remote: str = ""
    push_interval_ms: int = 200
    # Before-tool captures (source "outside"): separate a person's edits from the tool call's.
    bracket: bool = False
    # The guard (docs/guard.md): before a destructive shell command, a checkpoint plus the
    # ignored files under the worktree, within these bounds; dependency folders kept only when
    # named in ``guard_keep_dirs``.
    guard: bool = True
    guard_max_file_bytes: int = 16 << 20
    guard_max_total_bytes: int = 256 << 20
    guard_max_files: int = 10_000
    guard_keep_dirs: tuple[str, ...] = ()
    # "skip": credential files (.env, private keys, ...) are not captured; "capture": they are.
    secret_files: str = "skip"
    # Scan the files a capture changed for tokens; a checkpoint holding one is never pushed.
    secret_scan: bool = True
    # The loopback HTTP endpoint for agents that POST their hook payload (docs/agents.md).
    http_hook: bool = False
    http_hook_port: int = 47681
    # Most inotify watches the watcher adds (0: as many as the host allows); past it a worktree
    # is captured by scans, with a watch-failed gap (docs/watcher.md).
    max_watches: int = 0
    # The most lines and bytes one blame covers (the whole file, or its --lines range); past
    # them it is refused with a clear error, so a huge file cannot take gigabytes (docs/review.md).
    blame_max_lines: int = 200_000
    blame_max_bytes: int = 20 << 20
    # Each prompt's first line (redacted, capped) in the ledger's turns (docs/review.md,
    # "Turns"): "local" (true) keeps it in a ledger on this host only, "remote" in a shared
    # (PostgreSQL) ledger too, "off" (false) keeps only each turn's number and time.
    record_prompts: str = "local"
    # Per-worktree overrides (config file only): real path -> {WORKTREE_KEYS setting: value}.
    worktree: dict[str, dict[str, object]] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict, repr=False, compare=False)

    def as_dict(self) -> dict:
        """Every setting as shown to people (``config``, ``status``): secrets redacted."""
        return {f.name: _redacted(getattr(self, f.name)) for f in fields(self)
                if f.name != "sources"}

    def for_worktree(self, root: str | os.PathLike[str]) -> dict[str, object]:
        """The ``WORKTREE_KEYS`` settings in force for the worktree at ``root``: the host-wide
        values, overridden by each ``[worktree."…"]`` table whose path is ``root`` or one of
        its parents (after realpath), the most specific last."""
        real = os.path.realpath(root)
        settings: dict[str, object] = {key: getattr(self, key) for key in WORKTREE_KEYS}
        for path in sorted(self.worktree, key=len):
            if real == path or real.startswith(path.rstrip("/") + "/"):
                settings.update(self.worktree[path])
        return settings

    def __repr__(self) -> str:
        shown = ", ".join(f"{k}={v!r}" for k, v in self.as_dict().items())
        return f"Config({shown})"


# The environment variable of each setting (read by ``load_config``, shown by ``snapshotd config``).
ENV_VARS: dict[str, str] = {
    "settle_ms": "SNAPSHOTD_SETTLE_MS",
    "max_wait_ms": "SNAPSHOTD_MAX_WAIT_MS",
    "max_file_bytes": "SNAPSHOTD_MAX_FILE_BYTES",
    "excludes": "SNAPSHOTD_EXCLUDES",
    "hook_timeout_ms": "SNAPSHOTD_HOOK_TIMEOUT_MS",
    "durability": "SNAPSHOTD_DURABILITY",
    "max_zero_setup_files": "SNAPSHOTD_MAX_ZERO_SETUP_FILES",
    "idle_timeout_s": "SNAPSHOTD_IDLE_TIMEOUT_S",
    "max_connections": "SNAPSHOTD_MAX_CONNECTIONS",
    "scan_interval_s": "SNAPSHOTD_SCAN_INTERVAL_S",
    "verify_interval_s": "SNAPSHOTD_VERIFY_INTERVAL_S",
    "quiet_verify_share": "SNAPSHOTD_QUIET_VERIFY_SHARE",
    "linger_s": "SNAPSHOTD_LINGER_S",
    "ownerless_idle_s": "SNAPSHOTD_OWNERLESS_IDLE_S",
    "notifier": "SNAPSHOTD_NOTIFIER",
    "log_level": "SNAPSHOTD_LOG_LEVEL",
    "gc_keep_last": "SNAPSHOTD_GC_KEEP_LAST",
    "gc_older_than": "SNAPSHOTD_GC_OLDER_THAN",
    "gc_max_store_size": "SNAPSHOTD_GC_MAX_STORE_SIZE",
    "store_size_warn": "SNAPSHOTD_STORE_SIZE_WARN",
    "gc_interval_s": "SNAPSHOTD_GC_INTERVAL_S",
    "maintenance_interval_s": "SNAPSHOTD_MAINTENANCE_INTERVAL_S",
    "maintenance_loose_objects": "SNAPSHOTD_MAINTENANCE_LOOSE_OBJECTS",
    "maintenance_pack_limit": "SNAPSHOTD_MAINTENANCE_PACK_LIMIT",
    "store_budget": "SNAPSHOTD_STORE_BUDGET",
    "free_space_floor": "SNAPSHOTD_FREE_SPACE_FLOOR",
    "ledger_url": "SNAPSHOTD_LEDGER_URL",
    "remote": "SNAPSHOTD_REMOTE",
    "push_interval_ms": "SNAPSHOTD_PUSH_INTERVAL_MS",
    "bracket": "SNAPSHOTD_BRACKET",
    "guard": "SNAPSHOTD_GUARD",
    "guard_max_file_bytes": "SNAPSHOTD_GUARD_MAX_FILE_BYTES",
    "guard_max_total_bytes": "SNAPSHOTD_GUARD_MAX_TOTAL_BYTES",
    "guard_max_files": "SNAPSHOTD_GUARD_MAX_FILES",
    "guard_keep_dirs": "SNAPSHOTD_GUARD_KEEP_DIRS",
    "secret_files": "SNAPSHOTD_SECRET_FILES",
    "secret_scan": "SNAPSHOTD_SECRET_SCAN",
    "http_hook": "SNAPSHOTD_HTTP_HOOK",
    "http_hook_port": "SNAPSHOTD_HTTP_HOOK_PORT",
    "max_watches": "SNAPSHOTD_MAX_WATCHES",
    "blame_max_lines": "SNAPSHOTD_BLAME_MAX_LINES",
    "blame_max_bytes": "SNAPSHOTD_BLAME_MAX_BYTES",
    "record_prompts": "SNAPSHOTD_RECORD_PROMPTS",
}
RECORD_PROMPTS_MODES = ("local", "remote", "off")
LOG_LEVELS = ("debug", "info", "warning", "error")

_DAY_MS = 86_400_000
_TEN_YEARS_S = 315_360_000.0
# Seconds settings where 0 means "off" (every other one must be above 0).
ZERO_OFF_S = ("linger_s", "maintenance_interval_s")
# The range of each numeric setting (inclusive; the seconds settings but ``ZERO_OFF_S`` must be
# above 0). Past the maximum no value is useful, and some break what uses them: ``status``
# encodes the policy as msgpack (integers up to 2**64), a thread waits at most
# ``threading.TIMEOUT_MAX`` seconds. An int maximum means a whole number.
BOUNDS: dict[str, tuple[int | float, int | float]] = {
    "settle_ms": (1, _DAY_MS),
    "max_wait_ms": (1, _DAY_MS),
    "max_file_bytes": (1, 1 << 40),
    "hook_timeout_ms": (100, 120_000),  # as snapshot-hook clamps its own budget
    "max_zero_setup_files": (0, 1_000_000_000),
    "max_connections": (1, 1_000_000),
    "gc_keep_last": (0, 1_000_000_000),
    "maintenance_loose_objects": (0, 1_000_000_000),
    "maintenance_pack_limit": (2, 10_000),
    "push_interval_ms": (1, _DAY_MS),
    "http_hook_port": (0, 65535),
    "max_watches": (0, 1_000_000_000),
    "idle_timeout_s": (0.0, _TEN_YEARS_S),
    "scan_interval_s": (0.0, _TEN_YEARS_S),
    "verify_interval_s": (0.0, _TEN_YEARS_S),
    "gc_interval_s": (0.0, _TEN_YEARS_S),
    "maintenance_interval_s": (0.0, _TEN_YEARS_S),
    "linger_s": (0.0, _TEN_YEARS_S),
    "ownerless_idle_s": (0.0, _TEN_YEARS_S),
    "blame_max_lines": (1, 1_000_000_000),
    "blame_max_bytes": (1, 1 << 40),
    "guard_max_file_bytes": (0, 1 << 40),
    "guard_max_total_bytes": (0, 1 << 40),
    "guard_max_files": (0, 10_000_000),
}


REDACTED = "***"
# ``scheme://userinfo@``: the userinfo runs to the last "@" before the path (a raw "@" in a
# password is common enough), never across whitespace.
_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?![^/\s]*\[redacted:)(?P<userinfo>[^/\s]*)@")
# ``user:secret@host`` without a scheme: how ssh and other tools git runs echo a destination.
_BARE_USERINFO = re.compile(
    r"(?<![\w.+%\-])(?P<user>[\w.+%\-]+):(?P<secret>[^\s@/:'\"\]]+)@(?=[\w\[])")
# ``password=…``, ``token=…``, ``api_key=…``: URL query parameters, libpq key=value strings.
_SECRET_PARAM = re.compile(
    r"(?P<name>\b[A-Za-z_.\-]*(?:password|passwd|token|secret|api_?key)=)"
    r"(?![^&\s'\";#]*\[redacted:)(?P<value>[^&\s'\";#]*)",
    re.IGNORECASE)


def redact_url(url: str) -> str:
    """``url`` as shown to people: ``scheme://user:secret@host`` becomes ``user:***@host``, a bare
    ``https://TOKEN@host`` becomes ``***@host`` (over http a lone user name is how tokens are
    passed), and ``password=``/``token=``/``secret=``/``api_key=`` parameters become ``***``.
    Anything else (paths, ``postgresql:///db``, ``user@host:path``) is returned unchanged."""
    return redact_text(url)


def redact_text(text: str) -> str:
    """``text`` (a git error, a log line, a reply) with every credential in it redacted as
    ``redact_url`` does, in URLs, in scheme-less ``user:secret@host`` (as ssh echoes a
    destination) and in ``key=value`` parameters, and every token ``redact_secrets`` finds.
    Idempotent."""
    if not text:
        return text
    text = _USERINFO.sub(_redact_userinfo, text)
    text = _BARE_USERINFO.sub(lambda m: f"{m.group('user')}:{REDACTED}@", text)
    # Tokens before parameters, so that a token's marker keeps its kind
    # (``OPENAI_API_KEY=sk-…[redacted:openai]``): ``_SECRET_PARAM`` leaves a marker alone.
    text = redact_secrets(text)
    return _SECRET_PARAM.sub(lambda m: m.group("name") + REDACTED, text)


def _redact_userinfo(m: re.Match[str]) -> str:
    scheme, userinfo = m.group("scheme"), m.group("userinfo")
    user, colon, _password = userinfo.partition(":")
    if colon:
        return f"{scheme}{user}:{REDACTED}@"
    if scheme.lower().startswith(("http://", "https://")) and user != REDACTED:
        return f"{scheme}{REDACTED}@"
    return m.group(0)


class RedactingFilter(logging.Filter):
    """A logging filter that passes every record through ``redact_text``: its message, and the
    traceback of an exception logged with it (an exception may carry a URL or git's stderr)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        redacted = redact_text(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact_text(record.exc_text)
        return True


def _redacted(value: object) -> object:
    if isinstance(value, dict):
        return {_redacted(k): _redacted(v) for k, v in value.items()}
    return redact_text(value) if isinstance(value, str) else value


def config_path(environ: Mapping[str, str] | None = None) -> Path:
    env = os.environ if environ is None else environ
    if env.get("SNAPSHOTD_CONFIG"):
        return Path(env["SNAPSHOTD_CONFIG"])
    base = env.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "snapshotd" / "config.toml"


def load_config(flags: Mapping[str, object] | None = None,
                environ: Mapping[str, str] | None = None,
                path: Path | None = None) -> Config:
    """The effective configuration, each value tagged with its source."""
    env = os.environ if environ is None else environ
    config = Config()
    names = {f.name for f in fields(Config)} - {"sources"}
    for name in names:
        config.sources[name] = "default"
    path = path or config_path(env)
    text = _read_config_file(path)
    if text is not None:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"{path}: cannot be read as TOML: {exc}") from exc
        for key, value in data.items():
            if key not in names:
                raise ConfigError(
                    f"{path}: unknown key {key!r}; known keys: {', '.join(sorted(names))}")
            _set(config, key, value, f"file {path}")
    for key, var in ENV_VARS.items():
        if var in env and env[var] != "":
            _set(config, key, env[var], f"env {var}")
    for key, value in (flags or {}).items():
        if value is not None:
            if key not in names:
                raise ConfigError(f"unknown setting {key!r}")
            _set(config, key, value, "flag")
    return config


_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"),
          (stat.S_ISDIR, "a directory"))
# A config file is a few hundred bytes; a larger one is not one.
_MAX_CONFIG_BYTES = 1 << 20


def _read_config_file(path: Path) -> str | None:
    """The config file's text; None when nothing is at ``path``. Anything but a regular file
    (or a symlink to one) is a ``ConfigError`` saying what it is: it is never opened, so a FIFO
    cannot block the read, nor ``/dev/zero`` make it endless."""
    try:
        info = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(f"{path} is a symbolic link to {os.readlink(path)} that leads "
                              "nowhere; fix or remove it") from None
        return None
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    for test, kind in _KINDS:
        if test(info.st_mode):
            raise ConfigError(f"{path} is {kind}, not a regular file; point SNAPSHOTD_CONFIG "
                              "at a TOML file, or remove it")
    try:
        # O_NONBLOCK: should a FIFO replace the file since the stat, the open does not wait.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise ConfigError(f"{path} is not a regular file")
            data = b""
            while len(data) <= _MAX_CONFIG_BYTES:
                chunk = os.read(fd, _MAX_CONFIG_BYTES + 1 - len(data))
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
    except OSError as exc:
        raise ConfigError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    if len(data) > _MAX_CONFIG_BYTES:
        raise ConfigError(f"{path}: larger than {_MAX_CONFIG_BYTES} bytes; not a config file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: cannot be read as TOML: not UTF-8 ({exc})") from exc


def _set(config: Config, key: str, value: object, source: str) -> None:
    setattr(config, key, _coerce(key, value, source))
    config.sources[key] = source


def _coerce(key: str, value: object, source: str) -> object:
    where = f"{key} (from {source})"
    if key in ("excludes", "guard_keep_dirs"):
        if isinstance(value, str):
            items = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
            items = list(value)
        else:
            what = "gitignore patterns" if key == "excludes" else "folder names"
            raise ConfigError(f"{where}: expected a list of {what}, got {value!r}")
        return tuple(items)
    if key == "worktree":
        return _worktree_tables(value, source)
    if key == "durability":
        if value not in DURABILITY_MODES:
            raise ConfigError(f"{where}: expected one of {', '.join(DURABILITY_MODES)}, got {value!r}")
        return value
    if key == "ledger_url":
        if value in ("", None):
            return ""
        text = str(value)
        if not text.lower().startswith(("postgresql://", "postgres://", "sqlite:///")):
            raise ConfigError(f"{where}: expected postgresql://… (or sqlite:///path), got "
                              f"{text.split('://', 1)[0]!r}")
        return text
    if key == "notifier":
        if value not in NOTIFIER_KINDS:
            raise ConfigError(f"{where}: expected one of {', '.join(NOTIFIER_KINDS)}, got {value!r}")
        return value
    if key == "log_level":
        if not isinstance(value, str) or value.lower() not in LOG_LEVELS:
            raise ConfigError(f"{where}: expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return value.lower()
    if key == "remote":
        # A path, file://, ssh or https git URL; "" turns replication off.
        if not isinstance(value, str) or "\0" in value or "\n" in value:
            raise ConfigError(f"{where}: expected a git remote URL or path, got {value!r}")
        return value.strip()
    if key in ("bracket", "secret_scan", "http_hook", "guard"):
        return _boolean(value, where)
    if key == "record_prompts":
        return _record_prompts(value, where)
    if key == "secret_files":
        if value not in SECRET_FILE_MODES:
            raise ConfigError(f"{where}: expected one of {', '.join(SECRET_FILE_MODES)}, "
                              f"got {value!r}")
        return value
    if key in ("gc_older_than", "gc_max_store_size", "store_size_warn", "store_budget",
               "free_space_floor"):
        if value in ("", None):
            return ""
        parse = parse_duration if key == "gc_older_than" else parse_size
        try:
            parse(str(value))
        except ValueError as exc:
            raise ConfigError(f"{where}: {exc}") from None
        return str(value)
    if key == "quiet_verify_share":
        return _share_of_a_core(value, where)
    if key in BOUNDS:
        return _bounded(key, value, where)
    raise ConfigError(f"{where}: not a setting this version knows how to read")


def _bounded(key: str, value: object, where: str) -> int | float:
    """A numeric setting within ``BOUNDS[key]``; the error names the key, value and range."""
    low, high = BOUNDS[key]
    whole = isinstance(high, int)
    unit = "a whole number" if whole else "a number of seconds"
    span = (f"between {low} and {high}" if whole
            else f"between {low:g}{'' if key in ZERO_OFF_S else ' (exclusive)'} and {high:.0f}")
    if isinstance(value, bool):
        raise ConfigError(f"{where}: expected {unit} {span}, got {value!r}")
    try:
        number: int | float = float(value) if not whole else _whole(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        raise ConfigError(f"{where}: expected {unit} {span}, got {value!r}") from None
    if not whole and not math.isfinite(number):
        # The settle scheduler waits on these: on inf its tick is NaN and its thread ends.
        raise ConfigError(f"{where}: expected a finite number of seconds {span}, "
                          f"got {value!r}")
    too_low = number < low or (not whole and number == 0 and key not in ZERO_OFF_S)
    if too_low or number > high:
        raise ConfigError(f"{where}: expected {unit} {span}, got {value!r}")
    return number


def _whole(value: object) -> int:
    """``value`` as an int: a string of digits, an int, or a float with no fraction."""
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(value)  # type: ignore[call-overload]


def _share_of_a_core(value: object, where: str) -> float:
    """A share of one core: above 0, at most 1."""
    try:
        if isinstance(value, bool):
            raise TypeError(value)
        share = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: expected a share of a core, got {value!r}") from None
    if not 0 < share <= 1:
        raise ConfigError(f"{where}: expected a share of a core above 0 and at most 1 "
                          f"(0.0025 is a quarter of one percent), got {value!r}")
    return share


def _worktree_tables(value: object, source: str) -> dict[str, dict[str, object]]:
    """``[worktree."/abs/path"]`` tables as {real path: {setting: value}}, each setting checked
    as the host-wide one is; an error names the table and the key."""
    where = f"worktree (from {source})"
    if not isinstance(value, dict):
        raise ConfigError(f'{where}: expected [worktree."/abs/path"] tables, got {value!r}')
    tables: dict[str, dict[str, object]] = {}
    for path, table in value.items():
        name = f'worktree."{path}"'
        expanded = os.path.expanduser(path)
        if not os.path.isabs(expanded) or "\0" in expanded:
            raise ConfigError(f"{where}: {name}: expected an absolute worktree path")
        if not isinstance(table, dict):
            raise ConfigError(f"{where}: {name}: expected a table of settings, got {table!r}")
        settings: dict[str, object] = {}
        for key, setting in table.items():
            if key not in WORKTREE_KEYS:
                raise ConfigError(f"{where}: unknown key {name}.{key}; a worktree table "
                                  f"accepts {', '.join(WORKTREE_KEYS)}")
            settings[key] = _coerce(key, setting, f"{source}, table {name}")
        real = os.path.realpath(expanded)
        tables[real] = {**tables.get(real, {}), **settings}
    return tables


def _record_prompts(value: object, where: str) -> str:
    if isinstance(value, str) and value.strip().lower() in RECORD_PROMPTS_MODES:
        return value.strip().lower()
    try:
        return "local" if _boolean(value, where) else "off"
    except ConfigError:
        raise ConfigError(f"{where}: expected true, false or one of "
                          f"{', '.join(RECORD_PROMPTS_MODES)}, got {value!r}") from None


def _boolean(value: object, where: str) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise ConfigError(f"{where}: expected true or false, got {value!r}")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``12h``, ``7d``, ``2w`` (bare numbers are seconds)."""
    m = _DURATION.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a duration; use e.g. 90s, 30m, 12h, 7d or 2w")
    unit = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}[m.group(2)]
    return float(m.group(1)) * unit


def parse_size(text: str) -> int:
    """``500M``, ``2G``, ``1.5GiB``, ``4096`` (bytes)."""
    m = _SIZE.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a size; use e.g. 500M, 2G or 1.5GiB")
    unit = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m.group(2).lower()]
    return int(float(m.group(1)) * unit)
