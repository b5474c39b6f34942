"""The module boundaries hold: no import cycle, no private of another module, no giant module.

Walks the source with ``ast`` (imports inside functions count too), so a boundary broken by a
later change fails here with the offending file and line instead of in review.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80

# `x._name` that is not a private of ours: the stdlib's and namedtuple's public API.
ALLOWED_PRIVATE_ATTRS = {
    "_exit": "os._exit: the only way out of a forked child without running atexit handlers",
    "_replace": "namedtuple._replace is public API with a leading underscore",
}
# Entry points that exist to run the CLI.
CLI_ENTRY_POINTS = {
    "snapshotd.__main__": "`python -m snapshotd` is the CLI's entry point",
}


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package, directory in (("snapshotd", ROOT / "snapshotd"),
                               ("snapshotd_client", ROOT / "client")):
        for path in sorted(directory.rglob("*.py")):
            parts = list(path.relative_to(directory).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, path in MODULES.items()}


def _imports(name: str) -> list[tuple[str, int]]:
    """Modules of ours that ``name`` imports, anywhere in its body, with the line."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    out: list[tuple[str, int]] = []
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                out.append((target, node.lineno))
    return out


def _is_type_checking_only(name: str, lineno: int) -> bool:
    for node in ast.walk(TREES[name]):
        if (isinstance(node, ast.If) and isinstance(node.test, ast.Name)
                and node.test.id == "TYPE_CHECKING"
                and node.lineno <= lineno <= (node.end_lineno or lineno)):
            return True
    return False


def test_no_import_cycles() -> None:
    graph = {name: {t for t, line in _imports(name) if not _is_type_checking_only(name, line)}
             for name in MODULES}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in sorted(graph[node]):
            # A package's __init__ importing its own submodules is how packages work.
            if dep.startswith(node + "."):
                continue
            if state.get(dep) == 1:
                cycles.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    assert not cycles, "import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


def test_the_core_never_imports_the_cli() -> None:
    offenders = [f"{MODULES[name]}:{line} imports {target}"
                 for name in MODULES
                 if name.startswith("snapshotd") and not name.startswith("snapshotd.cli")
                 and name not in CLI_ENTRY_POINTS
                 for target, line in _imports(name)
                 if target == "snapshotd.cli" or target.startswith("snapshotd.cli.")]
    assert not offenders, "\n".join(offenders)


def _own_names(tree: ast.AST) -> set[str]:
    """Private names a module defines: functions, classes, globals, attributes of self/cls."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_")}


def test_no_module_uses_another_modules_privates() -> None:
    offenders: list[str] = []
    for name, tree in TREES.items():
        own = _own_names(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        offenders.append(f"{MODULES[name]}:{node.lineno} imports "
                                         f"{alias.name} from {node.module}")
            elif (isinstance(node, ast.Attribute) and node.attr.startswith("_")
                  and not node.attr.startswith("__")
                  and node.attr not in ALLOWED_PRIVATE_ATTRS and node.attr not in own):
                offenders.append(f"{MODULES[name]}:{node.lineno} uses {ast.unparse(node)}")
    assert not offenders, "\n".join(offenders)


def test_modules_and_functions_stay_small() -> None:
    offenders: list[str] = []
    for path in MODULES.values():  # the daemon's modules and the client's (snapshotd_client)
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{path}: {lines} lines (max {MAX_MODULE_LINES})")
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{MODULES[name]}:{node.lineno} {node.name}: {length} "
                                     f"lines (max {MAX_FUNCTION_LINES})")
    print("\n".join(offenders))
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("word", ["DESIGN §", "DESIGN.md"])
def test_no_reference_to_documents_outside_the_repository(word: str) -> None:
    paths = [*MODULES.values(), *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
             *sorted((ROOT / "tests").glob("*.py")), *sorted((ROOT / "bench").glob("*.py"))]
    offenders = [f"{p}:{i}" for p in paths if p.name != "test_boundaries.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if word in line]
    assert not offenders, "\n".join(offenders)
