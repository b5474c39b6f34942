"""The layout holds: the import rule of docs/architecture.md, no cycle, no private of another
module, no giant module, function or module docstring.

Walks the source with ``ast`` (imports inside functions and under ``TYPE_CHECKING`` count), so a
boundary broken by a later change fails here with the offending file and line, all of them
printed, instead of in review.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# A module's docstring says what it owns and promises; measurements live in docs/performance.md
# and longer explanations in the doc page the module belongs to.
MAX_DOCSTRING_LINES = 15

# The layers, lowest first (docs/architecture.md, "The import rule"): a package imports only
# from a lower layer or from itself; two layers of one rank (store and ledger, watch and
# features, mcp and ui) never import each other.
LAYERS: dict[str, int] = {
    "snapshotd_client": 0, "snapshotd": 0,
    "core": 1,
    "store": 2, "ledger": 2,
    "capture": 3,
    "service": 4,
    "watch": 5, "features": 5,
    "daemon": 6,
    "ops": 7,
    "mcp": 8, "ui": 8,
    "cli": 9,
}
# Modules of the top package that everything may import: the version and the package faces.
TOP_MODULES = {"snapshotd", "snapshotd.faces"}

# `x._name` that is not a private of ours: the stdlib's and namedtuple's public API.
ALLOWED_PRIVATE_ATTRS = {
    "_exit": "os._exit: the only way out of a forked child without running atexit handlers",
    "_replace": "namedtuple._replace is public API with a leading underscore",
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
PACKAGES = {name for name, path in MODULES.items() if path.name == "__init__.py"}


def _face(package: str) -> dict[str, str]:
    """A package's exported name -> the module defining it, from its ``FACE`` table."""
    out: dict[str, str] = {}
    for node in TREES[package].body:
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and node.target.id == "FACE" and isinstance(node.value, ast.Dict)):
            for key, value in zip(node.value.keys, node.value.values, strict=True):
                assert isinstance(key, ast.Constant) and isinstance(value, ast.Tuple), package
                for element in value.elts:
                    assert isinstance(element, ast.Constant), package
                    out[element.value] = f"{package}.{key.value}"
    return out


FACES = {package: _face(package) for package in PACKAGES}


class Import(NamedTuple):
    target: str        # the module that defines what is imported
    through: str       # the module or package the statement names
    line: int


def _resolve(base: str, name: str | None) -> tuple[str, str] | None:
    """(defining module, named module or package) of ``from base import name``."""
    if name is not None and f"{base}.{name}" in MODULES:
        return f"{base}.{name}", f"{base}.{name}"
    if base in PACKAGES and name is not None and name in FACES[base]:
        return FACES[base][name], base
    while base and base not in MODULES:
        base = base.rpartition(".")[0]
    return (base, base) if base else None


def imports(name: str) -> list[Import]:
    """What ``name`` imports of ours, anywhere in its body."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    out: list[Import] = []
    for node in ast.walk(TREES[name]):
        if isinstance(node, ast.Import):
            pairs = [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            pairs = [(base, alias.name) for alias in node.names]
        else:
            continue
        for base, imported in pairs:
            found = _resolve(base, imported)
            if found and found[0] != name:
                out.append(Import(found[0], found[1], node.lineno))
    return sorted(set(out), key=lambda imp: (imp.line, imp.target))


def layer(name: str) -> str:
    parts = name.split(".")
    if parts[0] == "snapshotd_client" or name in TOP_MODULES:
        return parts[0]
    return parts[1] if parts[1] != "__main__" else "cli"


def unit(name: str) -> str:
    """The package a module belongs to: itself for a package, else its parent."""
    return name if name in PACKAGES else name.rpartition(".")[0]


def _where(name: str, imp: Import) -> str:
    return f"{MODULES[name].relative_to(ROOT)}:{imp.line}"


def layer_offenders() -> list[str]:
    out: list[str] = []
    for name in MODULES:
        for imp in imports(name):
            mine, theirs = layer(name), layer(imp.target)
            if mine == theirs or imp.target in TOP_MODULES:
                continue
            if LAYERS[theirs] >= LAYERS[mine]:
                out.append(f"{_where(name, imp)} ({mine}) imports {imp.target} ({theirs})")
    return out


def face_offenders() -> list[str]:
    """Imports of a module inside another package instead of the package's face."""
    out: list[str] = []
    for name in MODULES:
        for imp in imports(name):
            if imp.target in TOP_MODULES or unit(imp.target) == unit(name):
                continue
            if imp.through not in PACKAGES:
                out.append(f"{_where(name, imp)} imports {imp.through}, a module inside "
                           f"{unit(imp.target)}: import through the package")
    return out


def cycles() -> list[list[str]]:
    graph = {name: sorted({imp.target for imp in imports(name)}) for name in MODULES}
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for dep in graph[node]:
            if state.get(dep) == 1:
                found.append(stack[stack.index(dep):] + [dep])
            elif dep not in state:
                visit(dep)
        stack.pop()
        state[node] = 2

    for name in sorted(graph):
        if name not in state:
            visit(name)
    return found


def _report(offenders: list[str]) -> str:
    """Every offender, printed (so ``-s`` shows them) and as the failing assertion's message."""
    text = f"{len(offenders)} offenders:\n" + "\n".join(offenders)
    print(text)
    return text


def test_every_module_is_in_a_layer() -> None:
    offenders = [f"{MODULES[name].relative_to(ROOT)}: in no layer of LAYERS"
                 for name in MODULES if layer(name) not in LAYERS]
    assert not offenders, _report(offenders)


def test_a_package_imports_only_lower_layers_or_itself() -> None:
    offenders = layer_offenders()
    assert not offenders, _report(offenders)


def test_another_package_is_imported_through_its_face() -> None:
    offenders = face_offenders()
    assert not offenders, _report(offenders)


def test_no_import_cycles() -> None:
    offenders = [" -> ".join(cycle) for cycle in cycles()]
    assert not offenders, _report(offenders)


def test_every_face_names_real_public_names() -> None:
    offenders: list[str] = []
    for package, table in FACES.items():
        for exported, module in table.items():
            defined = {getattr(node, "name", None) for node in TREES[module].body} | {
                name.id for node in TREES[module].body if isinstance(node, ast.Assign)
                for target in node.targets for name in ast.walk(target)
                if isinstance(name, ast.Name)} | {
                node.target.id for node in TREES[module].body
                if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)} | {
                alias.asname or alias.name for node in TREES[module].body
                if isinstance(node, ast.ImportFrom) for alias in node.names}
            if exported not in defined or exported.startswith("_"):
                offenders.append(f"{MODULES[package].relative_to(ROOT)}: {exported} is not a "
                                 f"public name of {module}")
    assert not offenders, _report(offenders)


def test_every_package_is_installed() -> None:
    """pyproject.toml lists packages by name (the client's folder is not its import name): a
    package missing there would be left out of every install but pass every test here."""
    listed = set(re.search(r"^packages = \[(.*?)\]", (ROOT / "pyproject.toml").read_text(),
                           re.M | re.S).group(1).replace('"', "").replace(",", " ").split())
    offenders = [f"{MODULES[package].relative_to(ROOT)}: not in pyproject.toml's packages"
                 for package in sorted(PACKAGES - listed)] + [
        f"pyproject.toml lists {name}, which is no package" for name in sorted(listed - PACKAGES)]
    assert not offenders, _report(offenders)


def test_every_package_says_what_it_is() -> None:
    offenders = [f"{MODULES[package].relative_to(ROOT)}: no docstring of one or two lines"
                 for package in PACKAGES
                 if not (doc := ast.get_docstring(TREES[package]) or "")
                 or len(doc.splitlines()) > 2]
    assert not offenders, _report(offenders)


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
    assert not offenders, _report(offenders)


def test_modules_and_functions_stay_small() -> None:
    offenders: list[str] = []
    for path in MODULES.values():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            offenders.append(f"{path.relative_to(ROOT)}: {lines} lines (max {MAX_MODULE_LINES})")
    for name, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    offenders.append(f"{MODULES[name].relative_to(ROOT)}:{node.lineno} "
                                     f"{node.name}: {length} lines (max {MAX_FUNCTION_LINES})")
    assert not offenders, _report(offenders)


def test_module_docstrings_stay_short() -> None:
    offenders: list[str] = []
    for name, tree in TREES.items():
        doc = ast.get_docstring(tree, clean=False)
        where = MODULES[name].relative_to(ROOT)
        if doc is None:
            offenders.append(f"{where}: no module docstring")
        elif (lines := len(doc.splitlines())) > MAX_DOCSTRING_LINES:
            offenders.append(f"{where}: docstring of {lines} lines (max {MAX_DOCSTRING_LINES})")
    assert not offenders, _report(offenders)


@pytest.mark.parametrize("word", ["DESIGN §", "DESIGN.md"])
def test_no_reference_to_documents_outside_the_repository(word: str) -> None:
    paths = [*MODULES.values(), *sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md",
             *sorted((ROOT / "tests").rglob("*.py")), *sorted((ROOT / "bench").glob("*.py"))]
    offenders = [f"{p}:{i}" for p in paths if p.name != "test_boundaries.py"
                 for i, line in enumerate(p.read_text().splitlines(), 1) if word in line]
    assert not offenders, _report(offenders)


def test_the_docs_name_only_files_that_exist() -> None:
    """A page naming ``snapshotd/<path>.py`` or ``client/<path>.py`` names a file of this tree
    (modules move; the pages that point at them must move along)."""
    pattern = re.compile(r"`((?:snapshotd|client)/[\w/]+\.py)`")
    offenders = [f"{page.relative_to(ROOT)}:{number} names {found}"
                 for page in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]
                 for number, line in enumerate(page.read_text().splitlines(), 1)
                 for found in pattern.findall(line) if not (ROOT / found).is_file()]
    assert not offenders, _report(offenders)


# A checkpoint trailer's name (``Snapshotd-Seq``, ...) or the prefix as a string to build one
# from; not an HTTP header (``X-Snapshotd-...``).
TRAILER_NAME = re.compile(r"(?<![\w-])Snapshotd-(?:[A-Za-z]|[\"'])")
CHECKPOINT_MODULE = "snapshotd.core.checkpoint"


def test_only_the_checkpoint_module_spells_a_trailer_name() -> None:
    """One home for the checkpoint's trailers: any other module reads and writes them through
    ``snapshotd.core.checkpoint`` (its names, ``Trailers``, ``Checkpoint``)."""
    home = MODULES[CHECKPOINT_MODULE].read_text()
    assert TRAILER_NAME.search(home), "the checkpoint module no longer names its trailers"
    offenders = [f"{path.relative_to(ROOT)}:{i}: {line.strip()}"
                 for name, path in MODULES.items()
                 if name.startswith("snapshotd.") and name != CHECKPOINT_MODULE
                 for i, line in enumerate(path.read_text().splitlines(), 1)
                 if TRAILER_NAME.search(line)]
    assert not offenders, _report(offenders)


# -- the sealed store ------------------------------------------------------------------------
# ``snapshotd.store`` is the only code that writes ``store.git`` (``store.lending`` states the
# seal): outside it, a repository is opened on the store or a stat cache only through
# ``Store.reader``/``thread_reader`` or ``store.lending.open_cache``, no ref or commit is written
# through any handle, and no git command that writes a repository runs. What follows may open a
# repository of its own, or run such a command, because it is not the store's:
SEAL_OPENS = {
    "snapshotd.core.user_repo": "the user's repository, read only",
    "snapshotd.capture.raw_bytes": "the user's git dir, for its config",
    "snapshotd.capture.seeding": "the user's repository: its HEAD against its index",
    "snapshotd.features.review.export": "a scratch repository for git format-patch",
}
SEAL_REF_WRITES = {
    "snapshotd.features.review.export": "the user's branch, and commits in the scratch one",
}
# (module, git command): a stat cache's ``git add -A`` writes blobs and the cache's own index,
# under the environment the store lends (``store.lending.cache_git_env``, checked below).
SEAL_GIT_WRITES = {
    ("snapshotd.capture.seeding", "add"): "a cold cache primed by git add -A",
    ("snapshotd.capture.deep_scan", "add"): "the deep scan's git add -A into its cache",
}
_OPENERS = {"Repository", "init_repository", "clone_repository"}
_REF_WRITERS = {"create_commit", "create_reference", "create_reference_direct",
                "create_reference_symbolic", "set_target"}
_GIT_WRITERS = {"add", "commit", "commit-tree", "fetch", "fast-import", "gc", "hash-object",
                "index-pack", "merge", "mktree", "notes", "pack-objects", "pack-refs", "prune",
                "prune-packed", "read-tree", "reflog", "repack", "replace", "reset",
                "symbolic-ref", "tag", "unpack-objects", "update-index", "update-ref",
                "write-tree"}


def _called(node: ast.Call) -> str:
    func = node.func
    return func.attr if isinstance(func, ast.Attribute) else \
        func.id if isinstance(func, ast.Name) else ""


def _git_argv_writes(node: ast.AST, calls_git: bool) -> set[str]:
    """The writing git commands a list literal spells, when it is a git command line: it holds
    ``"git"`` or is handed to a function whose name says git."""
    if not isinstance(node, ast.List | ast.Tuple):
        return set()
    words = {e.value for e in node.elts if isinstance(e, ast.Constant)
             and isinstance(e.value, str)}
    return words & _GIT_WRITERS if calls_git or "git" in words else set()


def seal_offenders() -> list[str]:
    out: list[str] = []
    for name, tree in TREES.items():
        if not name.startswith("snapshotd.") or unit(name) == "snapshotd.store" \
                or name == "snapshotd.store":
            continue
        where = MODULES[name].relative_to(ROOT)
        for node in ast.walk(tree):
            # A command line built beside its call (``cmd = ["git", ...]``) counts too.
            for command in sorted(_git_argv_writes(node, False)):
                if (name, command) not in SEAL_GIT_WRITES or not _lends_env(name):
                    out.append(f"{where}:{node.lineno} runs git {command}, which writes a "
                               "repository: give Store a method for it")
            if not isinstance(node, ast.Call):
                continue
            called = _called(node)
            if called in _OPENERS and name not in SEAL_OPENS:
                out.append(f"{where}:{node.lineno} opens a repository ({called}): go through "
                           "Store.reader or store.lending.open_cache")
            is_ref_write = called in _REF_WRITERS or (
                called in ("create", "delete") and isinstance(node.func, ast.Attribute)
                and _called_on(node.func.value) == "references")
            if is_ref_write and name not in SEAL_REF_WRITES:
                out.append(f"{where}:{node.lineno} writes a ref or a commit ({called}): only "
                           "the store does")
            if called == "TreeBuilder":
                out.append(f"{where}:{node.lineno} writes a tree object (TreeBuilder): only the "
                           "store does (the stat caches through the handle it lends them)")
            # Handed to a git runner (``run_git([...])``), the list need not say "git" itself.
            for arg in node.args if "git" in called.lower() else []:
                for command in sorted(_git_argv_writes(arg, True) - _git_argv_writes(arg, False)):
                    if (name, command) not in SEAL_GIT_WRITES or not _lends_env(name):
                        out.append(f"{where}:{node.lineno} runs git {command}, which writes a "
                                   "repository: give Store a method for it")
    return out


def _lends_env(name: str) -> bool:
    """Whether ``name`` runs git under the environment the store lends its caches."""
    return any(imp.target == "snapshotd.store.lending" for imp in imports(name))


def _called_on(node: ast.AST) -> str:
    return node.attr if isinstance(node, ast.Attribute) else \
        node.id if isinstance(node, ast.Name) else ""


def test_only_the_store_writes_its_repository() -> None:
    offenders = seal_offenders()
    assert not offenders, _report(offenders)


def test_the_seal_check_sees_what_it_forbids() -> None:
    """The check above finds each kind of breach in a module outside the store."""
    probe = ast.parse("import pygit2, subprocess\n"
                      "pygit2.Repository(path)\n"
                      "repo.references.create(ref, oid)\n"
                      "subprocess.run(['git', '-C', store, 'update-ref', ref, tip])\n"
                      "run_git(['-C', store, 'fetch', url])\n"
                      "cmd = ['git', '-C', store, 'gc']\n"
                      "repo.TreeBuilder().write()\n")
    name = "snapshotd.features.probe"
    MODULES[name], TREES[name] = MODULES["snapshotd.features.gc"], probe
    try:
        found = [line for line in seal_offenders() if ":" in line and "gc.py:" in line
                 and int(line.split(":")[1].split()[0]) <= 7]
    finally:
        del MODULES[name], TREES[name]
    assert len(found) == 6, found
