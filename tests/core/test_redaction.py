"""Secrets never leave in clear: every surface that shows a configured URL or a git error.

A remote with a made-up password (an unreachable https port, or an ssh remote whose "ssh" is a
script that echoes its destination the way ssh -v, a wrapper or a proxy can), and, on the
PostgreSQL variant, a ledger URL with a password (the test cluster trusts local connections, so
the password is carried but never checked). Each surface is read through the real CLI or the real
daemon's log: ``snapshotd config`` (text and ``--json``), ``snapshotd status`` (``--json`` and
text), the replies of ``push``, ``fetch``, ``handoff`` and a restore that must fetch, and the
daemon's log after failed pushes.
"""

from __future__ import annotations

import io
import json
import logging
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from snapshotd.core.config import RedactingFilter, load_config, redact_text, redact_url
from tests.conftest import QUIET_WATCHER, Daemon, Env, MakeDaemon, git, make_git_worktree
from tests.support.helpers import wait_for

REMOTE_SECRET = "s3cret-Remote-PW"
LEDGER_SECRET = "s3cret-Ledger-PW"
RUN = "red-run"
NODE = "red-node"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def https_remote() -> tuple[str, str]:
    """A remote URL with a password on a port nothing listens on, and how it must be shown."""
    port = closed_port()
    return (f"https://alice:{REMOTE_SECRET}@127.0.0.1:{port}/team/repo.git",
            f"https://alice:***@127.0.0.1:{port}/team/repo.git")


def with_ledger_password(env: Env) -> None:
    """On PostgreSQL, put a password into the ledger URL the daemon and the CLI use."""
    if env.ledger_url:
        url = env.ledger_url.replace("postgresql://postgres@",
                                     f"postgresql://postgres:{LEDGER_SECRET}@")
        assert LEDGER_SECRET in url
        env.vars["SNAPSHOTD_LEDGER_URL"] = url


def cli(env: Env, *args: str, **extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "snapshotd", *args], env=env.environ(**extra),
                          capture_output=True, text=True, timeout=120)


def assert_clean(text: str, where: str) -> None:
    assert REMOTE_SECRET not in text, f"{where} shows the remote's password:\n{text}"
    assert LEDGER_SECRET not in text, f"{where} shows the ledger's password:\n{text}"


def capture_one(daemon: Daemon, wt: Path, tool: str = "toolu_red1") -> dict:
    (wt / "work.txt").write_text(f"state {tool}\n")
    with daemon.client() as c:
        return c.snapshot(str(wt), run_id=RUN, node_id=NODE, tool_use_id=tool)


def wait_for_push_failure(env: Env) -> dict:
    """``status --json`` once it reports a failed push."""
    def failed() -> dict | None:
        proc = cli(env, "status", "--json")
        if proc.returncode != 0:
            return None
        status = json.loads(proc.stdout)
        return status if status["replication"].get("last_error") else None

    return wait_for(failed, timeout=30, what="a push failure in `snapshotd status`", every=0.1)


# -- the functions ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "shown"), [
    ("https://alice:pw1@host/x.git", "https://alice:***@host/x.git"),
    ("https://ghp_tokenvalue@github.com/o/r.git", "https://***@github.com/o/r.git"),
    ("ssh://git@host/x.git", "ssh://git@host/x.git"),
    ("ssh://bob:pw2@host:22/x.git", "ssh://bob:***@host:22/x.git"),
    ("git@github.com:o/r.git", "git@github.com:o/r.git"),
    ("/srv/remote.git", "/srv/remote.git"),
    ("postgresql:///db", "postgresql:///db"),
    ("postgresql://u:p@ss@127.0.0.1:5432/db", "postgresql://u:***@127.0.0.1:5432/db"),
    ("postgresql:///db?host=/run/pg&password=pw3&user=u",
     "postgresql:///db?host=/run/pg&password=***&user=u"),
    ("https://h/r.git?access_token=t1&x=1", "https://h/r.git?access_token=***&x=1"),
])
def test_redact_url_hides_every_credential_form(given: str, shown: str) -> None:
    assert redact_url(given) == shown
    assert redact_url(shown) == shown  # idempotent: a redacted value stays as it is


def test_redact_text_finds_credentials_inside_messages() -> None:
    text = ("fatal: unable to access 'https://alice:pw1@127.0.0.1:9/x.git/' | ssh: connecting "
            "with bob:pw2@127.0.0.1:2222 | host=db password=pw3 dbname=x | at 10:05:48 UTC")
    out = redact_text(text)
    for secret in ("pw1", "pw2", "pw3"):
        assert secret not in out
    assert "alice:***@127.0.0.1:9" in out and "bob:***@127.0.0.1" in out
    assert "10:05:48 UTC" in out  # times are not credentials


def test_config_repr_and_as_dict_redact(tmp_path: Path) -> None:
    remote, shown = https_remote()
    config = load_config(flags={"remote": remote,
                                "ledger_url": f"postgresql://u:{LEDGER_SECRET}@h/db"},
                         environ={}, path=tmp_path / "none.toml")
    assert config.remote == remote  # the value used is untouched; only what is shown changes
    assert config.as_dict()["remote"] == shown
    assert config.as_dict()["ledger_url"] == "postgresql://u:***@h/db"
    assert_clean(repr(config), "repr(Config)")


def test_logging_filter_redacts_messages_and_tracebacks() -> None:
    logger = logging.getLogger("snapshotd.test-redaction")
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    logger.addHandler(handler)
    logger.addFilter(RedactingFilter())
    logger.propagate = False
    try:
        logger.warning("push to %s failed", f"https://a:{REMOTE_SECRET}@h/x")
        try:
            raise RuntimeError(f"git ls-remote https://a:{REMOTE_SECRET}@h/x timed out")
        except RuntimeError:
            logger.exception("replication pass failed")
    finally:
        logger.removeHandler(handler)
    out = stream.getvalue()
    assert_clean(out, "a log line")
    assert "push to https://a:***@h/x failed" in out
    assert "RuntimeError: git ls-remote https://a:***@h/x timed out" in out


# -- snapshotd config ------------------------------------------------------------------------------


def test_config_text_and_json_hide_remote_and_ledger_passwords(sd_env: Env) -> None:
    remote, shown = https_remote()
    file_remote = f"ssh://carol:{REMOTE_SECRET}@git.example/x.git"
    config_file = Path(sd_env.vars["XDG_CONFIG_HOME"]) / "snapshotd" / "config.toml"
    config_file.parent.mkdir(parents=True, exist_ok=True)
    config_file.write_text(f'remote = "{file_remote}"\n')
    ledger = f"postgresql://bob:{LEDGER_SECRET}@127.0.0.1:1/db?sslpassword={LEDGER_SECRET}"
    # From the file.
    text = cli(sd_env, "config")
    assert text.returncode == 0, text.stderr
    assert_clean(text.stdout + text.stderr, "snapshotd config (file)")
    assert "ssh://carol:***@git.example/x.git" in text.stdout
    # From the environment, text and JSON.
    env = {"SNAPSHOTD_REMOTE": remote, "SNAPSHOTD_LEDGER_URL": ledger}
    text = cli(sd_env, "config", **env)
    assert text.returncode == 0, text.stderr
    assert_clean(text.stdout + text.stderr, "snapshotd config")
    assert shown in text.stdout
    js = cli(sd_env, "config", "--json", **env)
    assert js.returncode == 0, js.stderr
    assert_clean(js.stdout + js.stderr, "snapshotd config --json")
    settings = json.loads(js.stdout)["settings"]
    assert settings["remote"]["value"] == shown
    assert settings["remote"]["env"] == "SNAPSHOTD_REMOTE"
    # ``sslpassword`` is a joined password name: the token rules redact it first.
    assert settings["ledger_url"]["value"] == \
        "postgresql://bob:***@127.0.0.1:1/db?sslpassword=…[redacted:assignment]"


# -- status and the daemon's log -------------------------------------------------------------------


def test_status_and_daemon_log_hide_passwords_while_pushes_fail(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    with_ledger_password(sd_env)
    remote, shown = https_remote()
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=remote,
                                      SNAPSHOTD_PUSH_INTERVAL_MS="20"))
    capture_one(daemon, make_git_worktree(tmp_path / "wt"))
    status = wait_for_push_failure(sd_env)
    raw = cli(sd_env, "status", "--json")
    assert_clean(raw.stdout + raw.stderr, "snapshotd status --json")
    assert status["replication"]["remote"] == shown
    assert status["config"]["remote"] == shown
    if sd_env.ledger_url:
        assert ":***@" in status["config"]["ledger_url"]
    text = cli(sd_env, "status")
    assert_clean(text.stdout + text.stderr, "snapshotd status")
    assert "FAILING" in text.stdout
    daemon.stop()
    log = daemon.log.read_text(errors="replace")
    assert f"replication to {shown} failed" in log  # the failure was logged, redacted
    assert_clean(log, "the daemon's log")


# -- git errors that echo credentials ----------------------------------------------------------------


def echoing_ssh_remote(env: Env, tmp_path: Path) -> tuple[str, str]:
    """An ssh remote whose ssh command prints its destination to stderr and fails, the way a
    verbose ssh or a wrapper script does; git relays it."""
    script = tmp_path / "echo-ssh"
    script.write_text('#!/bin/sh\necho "echo-ssh: cannot connect to $1" >&2\nexit 255\n')
    script.chmod(0o755)
    gitconfig = Path(env.vars["XDG_CONFIG_HOME"]) / "git" / "config"
    gitconfig.parent.mkdir(parents=True, exist_ok=True)
    gitconfig.write_text(f"[core]\n\tsshCommand = {script}\n")
    return (f"ssh://dave:{REMOTE_SECRET}@127.0.0.1/team/repo.git",
            "ssh://dave:***@127.0.0.1/team/repo.git")


def test_git_errors_echoing_credentials_are_redacted_in_replies_status_and_log(
        sd_env: Env, tmp_path: Path, make_daemon: MakeDaemon) -> None:
    with_ledger_password(sd_env)
    remote, shown = echoing_ssh_remote(sd_env, tmp_path)
    extra = dict(QUIET_WATCHER, SNAPSHOTD_REMOTE=remote, SNAPSHOTD_PUSH_INTERVAL_MS="20")
    daemon = make_daemon(sd_env, extra)
    capture_one(daemon, make_git_worktree(tmp_path / "wt"))
    status = wait_for_push_failure(sd_env)
    error = status["replication"]["last_error"]
    # git's words are kept; since run_git passes no password over ssh (it takes none from a
    # URL), what the ssh command echoes names the user alone.
    assert "echo-ssh: cannot connect to dave@127.0.0.1" in error
    assert_clean(json.dumps(status), "status --json")
    for args in (("push",), ("push", RUN), ("fetch", RUN)):
        proc = cli(sd_env, *args, **extra)
        assert proc.returncode == 1, (args, proc.stdout, proc.stderr)
        assert "dave:***@" in proc.stderr, (args, proc.stderr)
        assert_clean(proc.stdout + proc.stderr, f"snapshotd {' '.join(args)}")
    proc = cli(sd_env, "handoff", RUN, "--node", NODE, "--json", **extra)
    assert proc.returncode == 0, proc.stderr
    assert_clean(proc.stdout + proc.stderr, "snapshotd handoff --json")
    replication = json.loads(proc.stdout)["replication"]
    assert replication["remote"] == shown and replication["state"] == "unreachable"
    assert "dave:***@" in replication["error"]
    daemon.stop()
    assert_clean(daemon.log.read_text(errors="replace"), "the daemon's log")
    # Restore anywhere, with no daemon: the store lost the checkpoint, the fetch fails, and
    # the error names the remote and git's words, redacted.
    store = sd_env.home / "store.git"
    for ref in git(store, "for-each-ref", "--format=%(refname)").split():
        git(store, "update-ref", "-d", ref)
    git(store, "reflog", "expire", "--expire=now", "--all")
    git(store, "gc", "-q", "--prune=now")
    proc = cli(sd_env, "restore", RUN, "--node", NODE, "--to", str(tmp_path / "out"), **extra)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "could not fetch" in proc.stderr and "dave:***@" in proc.stderr
    assert_clean(proc.stdout + proc.stderr, "snapshotd restore (fetch failed)")


# -- credential shapes in labels (issue 48, item 5) ------------------------------------------------

# One row per shape: the text, and the secret it holds (which must not survive redaction).
# Every value is made up.
CREDENTIAL_SHAPES = [
    ("PGPASSWORD=hunter2x psql -h db", "hunter2x"),
    ("PGPASSWORD=hunt3r psql", "hunt3r"),
    ("HFTOKEN=hf_Qm3xT8vR2kLp9Wz4Yb7N huggingface-cli", "hf_Qm3xT8vR2kLp9Wz4Yb7N"),
    ("HF_TOKEN=hf_Zq8Wx2Lm5Rt9Yp3Ks7Dv python train.py", "hf_Zq8Wx2Lm5Rt9Yp3Ks7Dv"),
    ("REDISPASSWORD=r3d1s-Pw0rd redis-cli", "r3d1s-Pw0rd"),
    ("PG_PASS=p4ssW0rd! ./migrate", "p4ssW0rd!"),
    ("DB_PASSWD=Sup3rS3cr3t make db", "Sup3rS3cr3t"),
    ("export API_KEY=Zx9Yw8Vu7Ts6Rq5Po4Nm3", "Zx9Yw8Vu7Ts6Rq5Po4Nm3"),
    ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY aws s3 ls",
     "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"),
    ("MYSQL_PWD=Tr0ub4dor3 mysql", "Tr0ub4dor3"),
    ("SSHPASS=c0rrectHorse sshpass -e ssh host", "c0rrectHorse"),
    ("GITHUB_AUTH=Xy7Qw2Er9Ty5Ui8Op1As deploy", "Xy7Qw2Er9Ty5Ui8Op1As"),
    ("GOOGLE_CREDENTIALS=Qm3xT8vR2kLp9Wz4Yb7Nc1 gcloud", "Qm3xT8vR2kLp9Wz4Yb7Nc1"),
    ("dbPassword=Kx8Lm2Nq7 node app.js", "Kx8Lm2Nq7"),
    ("clientSecret: Vb8Nm2Qx7Lk4Jh9Gf3Ds6", "Vb8Nm2Qx7Lk4Jh9Gf3Ds6"),
    ("mysqladmin --password=Hx7Lk2Pq9 status", "Hx7Lk2Pq9"),
    ("psql --password Hx7Lk2Pq9 -h db", "Hx7Lk2Pq9"),
    ("deploy --token Rt5Yu8Io2Pa7Sd3Fg", "Rt5Yu8Io2Pa7Sd3Fg"),
    ("deploy --token=Rt5Yu8Io2Pa7Sd3Fg", "Rt5Yu8Io2Pa7Sd3Fg"),
    ("openai --api-key Qw8Er4Ty7Ui1Op3As5Df", "Qw8Er4Ty7Ui1Op3As5Df"),
    ("tool --secret 'Mn4Bv7Cx1Zl9Kj3Hg' run", "Mn4Bv7Cx1Zl9Kj3Hg"),
    ("mysql -uroot -pS3cr3tPw db", "S3cr3tPw"),
    ("mysqldump -u app -p'Qz7Wx3Ec' shop > dump.sql", "Qz7Wx3Ec"),
    ("mariadb -h db -pMar1aPw9", "Mar1aPw9"),
    ("sshpass -p Hunter2Pw ssh host", "Hunter2Pw"),
    ("curl -H 'Authorization: Bearer abcdefghij' api.example", "abcdefghij"),
    ('curl -H "Authorization: Basic dXNlcjpwYXNz" api.example', "dXNlcjpwYXNz"),
    ("curl -H 'Authorization: token plainvalue' x", "plainvalue"),
    ("curl -u alice:Pa55w0rdX https://api.example/", "Pa55w0rdX"),
    ("curl --user alice:Pa55w0rdX https://api.example/", "Pa55w0rdX"),
    ("git clone https://alice:Pw9xQ2mV@git.example/r.git", "Pw9xQ2mV"),
    ("psql postgresql://app:s3cr3t@db/prod", "s3cr3t"),
]


@pytest.mark.parametrize(("text", "secret"), CREDENTIAL_SHAPES,
                         ids=[t.split()[0][:24] + f"-{i}" for i, (t, _s) in
                              enumerate(CREDENTIAL_SHAPES)])
def test_each_credential_shape_is_redacted(text: str, secret: str) -> None:
    from snapshotd.core.secrets import redact_secrets

    out = redact_secrets(text)
    assert secret not in out, out
    assert "[redacted:" in out, out
    assert redact_secrets(out) == out  # idempotent
    # What is not the secret is kept: the command stays readable.
    assert out.split()[-1] == text.split()[-1] or secret in text.split()[-1]


# Names and flags that look like credentials and are not: left alone.
NOT_CREDENTIALS = [
    "KEYBOARD=us-intl-altgr setxkbmap",
    "PASSTHROUGH=enabled-for-all ./run",
    "monkey=Zx9Yw8Vu7Ts6Rq5Po4Nm3",
    "turkey=Zx9Yw8Vu7Ts6Rq5Po4Nm3",
    "HOTKEY=ctrl-alt-shift-9 ./app",
    "BYPASS=sandbox-mode-2 make",
    "PWD=/home/me/src/project-42 make",
    "OLDPWD=/home/me/src/project-41 cd -",
    "PGPASSWORD=${DB_PASSWORD} psql",
    "PGPASSWORD=$PW psql",
    "psql --password -h db",
    "deploy --token \"$TOKEN\"",
    "deploy --token-file /run/secrets/token",
    "curl --key /etc/ssl/client.key https://x",
    "mysql -p shop",
    "mysql -P3306 -h db",
    "git add -p src/main.py",
    "docker run -u 1000:1000 image",
    "sort -u names.txt",
    "curl -u alice https://api.example/",
    "grep -rn 'Authorization' src/",
    "password: string",
    "MAX_TOKENS=4096 ./bench",
]


@pytest.mark.parametrize("text", NOT_CREDENTIALS)
def test_what_only_looks_like_a_credential_is_left_alone(text: str) -> None:
    from snapshotd.core.secrets import redact_secrets

    assert redact_secrets(text) == text


def test_label_is_redacted_before_it_is_cut(sd_env: Env, make_daemon: MakeDaemon,
                                            tmp_path: Path) -> None:
    """A Bash command whose GitHub token straddles the old 60-character cut: no piece of the
    token beyond its well-known prefix (and four characters) reaches the store or a listing."""
    from tests.conftest import run_hook

    token = "ghp_" + "Qm3xT8vR2kLp9Wz4Yb7Nc1Hd6Fg0Js5AxYz9"  # ghp_ + 36
    assert len(token) == 40
    lead = "echo deploying the service now && git push https://"  # 52 characters
    command = f"{lead}{token}@github.com/o/r.git"
    assert len(lead) < 60 < len(lead) + len(token)  # the old cut fell inside the token
    daemon = make_daemon(sd_env, dict(QUIET_WATCHER))
    wt = make_git_worktree(tmp_path / "wt")
    (wt / "f.txt").write_text("x\n")
    payload = {"session_id": "sess-cut", "cwd": str(wt), "tool_use_id": "toolu_cut1",
               "hook_event_name": "PostToolUse", "tool_name": "Bash",
               "tool_input": {"command": command}, "tool_response": {"stdout": ""}}
    hook = run_hook(sd_env, payload)
    assert hook.returncode == 0, hook.stderr
    messages = git(sd_env.home / "store.git", "log", "--all", "--format=%B")
    listing = cli(sd_env, "snapshots", "claude-sess-cut")
    listing_json = cli(sd_env, "snapshots", "claude-sess-cut", "--json")
    assert listing.returncode == 0 and listing_json.returncode == 0, listing.stderr
    daemon.stop()
    assert "Snapshotd-Label: Bash echo deploying" in messages, messages
    assert "[redacted:github]" in messages, messages
    for where, text in (("the store's commit messages", messages),
                        ("snapshotd snapshots", listing.stdout + listing.stderr),
                        ("snapshotd snapshots --json", listing_json.stdout),
                        ("the daemon's log", daemon.log.read_text(errors="replace"))):
        assert token[:9] not in text, f"{where} holds a piece of the token:\n{text}"
