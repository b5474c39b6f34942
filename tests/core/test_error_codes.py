"""Error codes live in one place: ``snapshotd_client.protocol`` (a constant each, and
``ERROR_CODES``). The daemon raises only those constants, docs/protocol.md lists exactly them,
and the client exposes them.

(a) walks the AST of every module under ``snapshotd/``: the code of every ``ServiceError(...)``
and of every error reply the server builds must be a constant from ``snapshotd.core.errors`` or
``snapshotd_client.protocol`` whose value is in ``ERROR_CODES`` (never a string literal); a code
passed on from a caught error (``exc.code``) was checked where it was raised.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import snapshotd
from snapshotd.core import errors
from snapshotd_client import protocol

pytestmark = pytest.mark.one_ledger("the daemon's error codes")

PKG = Path(snapshotd.__file__).parent
DOC = PKG.parent / "docs" / "protocol.md"
# The modules defining the codes, and the package faces exporting them.
CODE_MODULES = {"snapshotd.core.errors": errors, "snapshotd.core": errors,
                "snapshotd_client.protocol": protocol, "snapshotd_client": protocol}
MODULES = sorted(PKG.rglob("*.py"))
# The front ends' path to the daemon speaks for the client when the daemon goes away mid-request,
# so it may raise the client-side codes too; nothing in the daemon may.
CLIENT_SIDE = {"snapshotd/ops/backend.py"}


# -- (a) the daemon raises only the constants ------------------------------------------------------


def code_problems(source: str, filename: str = "<src>", *, client_side: bool = False) -> list[str]:
    """Every place in ``source`` where an error code is not a protocol constant. A function that
    takes the code as a parameter (an error-reply builder, a helper raising ``ServiceError``) is
    checked at its call sites instead."""
    tree = ast.parse(source, filename)
    modules, names = _imports(tree)
    problems: list[str] = []

    def check(node: ast.expr | None, where: ast.AST, what: str) -> None:
        if node is None:
            problems.append(f"{filename}:{where.lineno} {what} without a code")
            return
        problem = _code_problem(node, modules, names, client_side)
        if problem:
            problems.append(f"{filename}:{where.lineno} {what}: {problem}")

    sites, builders = _code_sites(tree)
    for node, value in sites:
        if value is not None:
            check(value, node, "ServiceError" if isinstance(node, ast.Call) else "error reply")
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) in builders:
            name = _call_name(node)
            index, param = builders[name]  # type: ignore[index]
            if isinstance(node.func, ast.Attribute):
                index -= 1  # a method called on its object: no ``self`` among the arguments
            check(_argument(node, index, param), node, f"{name}()")
    return problems


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(PKG)) for p in MODULES])
def test_every_code_the_daemon_raises_is_a_protocol_constant(path: Path) -> None:
    name = str(path.relative_to(PKG.parent))
    assert code_problems(path.read_text(), name, client_side=name in CLIENT_SIDE) == []


def test_the_checker_catches_literals_and_unknown_constants() -> None:
    source = '''
from snapshotd.core import errors
from snapshotd.core.errors import ServiceError, NOT_FOUND

def _error(req_id, code, message):
    return {"id": req_id, "ok": False, "error": {"code": code, "message": message}}

def f(exc, reason):
    raise ServiceError("not-found", "literal")
    raise ServiceError(errors.NO_SUCH_CODE, "unknown constant")
    raise ServiceError(exc.reason, "not a code")
    raise ServiceError(errors.NOT_FOUND if reason else "bad-id", "one literal branch")
    raise ServiceError(NOT_FOUND, "fine")
    raise ServiceError(errors.FENCED if reason else errors.CONFLICT, "fine")
    raise ServiceError(exc.code, "fine: passed on")
    _error(1, "busy", "literal reply")
    _error(1, errors.BUSY, "fine")

class Refuser:
    def refuse(self, detail, code):
        raise ServiceError(code, detail)

    def use(self):
        self.refuse("x", "worktree-refused")
        self.refuse("x", errors.WORKTREE_REFUSED)
'''
    problems = code_problems(source)
    lines = [int(p.split(":")[1].split()[0]) for p in problems]
    assert lines == [9, 10, 11, 12, 16, 24], problems


# -- (b) docs/protocol.md lists exactly ERROR_CODES ------------------------------------------------


def documented_codes() -> list[str]:
    text = DOC.read_text()
    section = re.split(r"\n#{2,} ", text.split("\n## Error codes\n", 1)[1], maxsplit=1)[0]
    return re.findall(r"^- `([a-z0-9-]+)`: \S", section, flags=re.MULTILINE)


def test_the_protocol_doc_lists_exactly_the_codes() -> None:
    listed = documented_codes()
    assert len(listed) == len(set(listed)), "a code is listed twice"
    assert set(listed) == set(protocol.ERROR_CODES)


# -- (c) one vocabulary, exposed by the client ----------------------------------------------------


def test_the_client_exposes_every_code_as_a_constant() -> None:
    from snapshotd_client.protocol import ERROR_CODES

    assert errors.ERROR_CODES is ERROR_CODES
    for code in ERROR_CODES:
        constant = code.upper().replace("-", "_")
        assert getattr(protocol, constant) == code
        assert getattr(errors, constant) == code  # re-exported for the daemon's modules


# -- helpers ---------------------------------------------------------------------------------------


def _imports(tree: ast.Module) -> tuple[dict[str, str], dict[str, str]]:
    """Local names bound to a code module, and local names bound to a constant of one."""
    modules: dict[str, str] = {}
    names: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if full in CODE_MODULES:
                    modules[alias.asname or alias.name] = full
                elif node.module in CODE_MODULES:
                    names[alias.asname or alias.name] = node.module
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in CODE_MODULES and alias.asname:
                    modules[alias.asname] = alias.name
    return modules, names


def _code_problem(node: ast.expr, modules: dict[str, str], names: dict[str, str],
                  client_side: bool = False) -> str | None:
    if isinstance(node, ast.IfExp):
        return _code_problem(node.body, modules, names, client_side) or \
            _code_problem(node.orelse, modules, names, client_side)
    if isinstance(node, ast.Attribute) and node.attr == "code":
        return None  # passed on from a caught error, checked where that was raised
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
            and node.value.id in modules:
        value = getattr(CODE_MODULES[modules[node.value.id]], node.attr, None)
    elif isinstance(node, ast.Name) and node.id in names:
        value = getattr(CODE_MODULES[names[node.id]], node.id, None)
    else:
        return f"{ast.unparse(node)!r} is not a protocol constant"
    if value not in protocol.ERROR_CODES and not (client_side and value in protocol.CLIENT_CODES):
        return f"{ast.unparse(node)} is not in ERROR_CODES"
    return None


def _code_sites(tree: ast.Module) -> tuple[list[tuple[ast.AST, ast.expr | None]],
                                             dict[str, tuple[int, str]]]:
    """Where codes are given (``ServiceError(...)`` calls, dicts with ``code`` and ``message``)
    and the functions that pass a parameter on as one: name → (parameter index, name)."""
    sites: list[tuple[ast.AST, ast.expr | None]] = []
    builders: dict[str, tuple[int, str]] = {}
    owner: dict[ast.AST, ast.FunctionDef | ast.AsyncFunctionDef] = {}
    for func in ast.walk(tree):
        if isinstance(func, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(func):
                owner[node] = func  # the innermost function wins: walked after its parents
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _call_name(node) == "ServiceError":
            value = _argument(node, 0, "code")
        elif isinstance(node, ast.Dict):
            keys = {k.value: v for k, v in zip(node.keys, node.values, strict=True)
                    if isinstance(k, ast.Constant)}
            if "code" not in keys or "message" not in keys:
                continue
            value = keys["code"]
        else:
            continue
        func = owner.get(node)
        params = [a.arg for a in func.args.args] if func is not None else []
        if isinstance(value, ast.Name) and value.id in params:
            assert func is not None
            builders[func.name] = (params.index(value.id), value.id)
            sites.append((node, None))
        else:
            sites.append((node, value))
    return sites, builders


def _call_name(node: ast.Call) -> str | None:
    if isinstance(node.func, ast.Name):
        return node.func.id
    if isinstance(node.func, ast.Attribute):
        return node.func.attr
    return None


def _argument(node: ast.Call, index: int, name: str) -> ast.expr | None:
    if len(node.args) > index and not any(isinstance(a, ast.Starred) for a in node.args[:index + 1]):
        return node.args[index]
    for kw in node.keywords:
        if kw.arg == name:
            return kw.value
    return None
