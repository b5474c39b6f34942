"""Building ``snapshot-hook-native``: the hook as a small compiled program (``client/native``).

Owns finding the C source shipped in ``snapshotd_client``, the Python hook it hands over to,
and the compiler run. The program itself is ``client/native/snapshot_hook.c``; what it does
and when it hands a payload to ``snapshot-hook`` is in its opening comment and in
docs/agents.md ("The native hook").

Promises:
- ``build`` compiles with the C compiler named (``$CC``, else ``cc``) as an argument list,
  never through a shell; the Python hook's absolute path is compiled in as a C string literal
  whatever bytes it holds; the program appears at ``output`` only once it is built and
  executable (written beside it, then renamed), and a failed build leaves what was there.
- ``BuildError`` says what went wrong in one sentence: no compiler, no Python hook, the
  compiler's own first lines of error.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
import tempfile
from importlib import resources
from pathlib import Path

NAME = "snapshot-hook-native"
SOURCE = ("native", "snapshot_hook.c")
CFLAGS = ("-O2", "-std=c11", "-Wall")
_COMPILE_TIMEOUT_S = 120


class BuildError(Exception):
    """The native hook could not be built; the message says why and what to do."""


def scripts_dir() -> Path:
    """Where this interpreter's installer put ``snapshot-hook`` (a venv's ``bin``)."""
    return Path(sysconfig.get_path("scripts"))


def python_hook() -> Path:
    """The installed ``snapshot-hook`` the native hook hands over to."""
    return scripts_dir() / "snapshot-hook"


def build(output: Path | None = None, *, fallback: Path | None = None,
          compiler: str | None = None) -> Path:
    """Compile the native hook to ``output`` (default: beside ``snapshot-hook``), handing over
    to ``fallback`` (default: ``python_hook()``). Returns the absolute path written."""
    fallback = Path(os.path.abspath(fallback or python_hook()))
    if not os.access(fallback, os.X_OK):
        raise BuildError(f"{fallback} is not an executable snapshot-hook to hand payloads "
                         f"over to; install snapshotd in this environment (or pass "
                         f"--fallback)")
    output = Path(os.path.abspath(output or scripts_dir() / NAME))
    cc = compiler or os.environ.get("CC") or "cc"
    cc_path = shutil.which(cc)
    if cc_path is None:
        raise BuildError(f"no C compiler {cc!r} on PATH: install one (Debian/Ubuntu: "
                         f"apt-get install gcc) or name it with --cc; snapshot-hook keeps "
                         f"working meanwhile")
    source = resources.files("snapshotd_client").joinpath(*SOURCE)
    with resources.as_file(source) as src:
        fd, tmp = tempfile.mkstemp(prefix=f".{NAME}.", dir=output.parent)
        os.close(fd)
        try:
            argv = [cc_path, *CFLAGS, f"-DFALLBACK_HOOK={c_string(os.fsencode(fallback))}",
                    "-o", tmp, os.fspath(src)]
            done = subprocess.run(argv, capture_output=True, text=True,
                                  timeout=_COMPILE_TIMEOUT_S, check=False)
            if done.returncode != 0:
                lines = (done.stderr or done.stdout).strip().splitlines()[:5]
                raise BuildError(f"{cc} failed (exit {done.returncode}): " + " | ".join(lines))
            os.chmod(tmp, 0o755)
            os.replace(tmp, output)
        except subprocess.TimeoutExpired:
            raise BuildError(f"{cc} did not finish within {_COMPILE_TIMEOUT_S} s") from None
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
    return output


def c_string(raw: bytes) -> str:
    """``raw`` as a C string literal: printable ASCII as itself, everything else (quotes,
    backslashes, bytes that are not ASCII) as a three-digit octal escape."""
    out = ['"']
    for byte in raw:
        char = chr(byte)
        if 0x20 <= byte < 0x7f and char not in '"\\?':
            out.append(char)
        else:
            out.append(f"\\{byte:03o}")
    out.append('"')
    return "".join(out)
