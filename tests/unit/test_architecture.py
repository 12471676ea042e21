"""The engine's import graph, read from the source: imports run one way and never in a circle.

The operator may import the engine (``kubejury``), never the reverse: the engine runs in Jobs and
on laptops where the operator's dependencies and assumptions do not hold. A cycle between engine
modules means neither can be read, tested or moved without the other. Both rules are checked on
the source text (``ast``), so an import inside a function or under ``TYPE_CHECKING`` counts too.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from pathlib import Path

ENGINE_ROOT = Path(__file__).resolve().parents[2] / "jobs"
ENGINE = "kubejury"


def module_name(path: Path, root: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(tree: ast.Module, module: str, is_package: bool) -> Iterator[tuple[str, tuple[str, ...]]]:
    """Each import of ``module`` as (dotted base, names taken from it), relative imports resolved;
    ``import X.Y`` is ("X.Y", ())."""
    package = module if is_package else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                anchor = ".".join(parts[: len(parts) - (node.level - 1)])
                base = f"{anchor}.{base}" if base else anchor
            yield base, tuple(alias.name for alias in node.names)


def engine_imports(root: Path = ENGINE_ROOT) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """Module → its imports, for each module of the engine package."""
    imports: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    for path in sorted((root / ENGINE).rglob("*.py")):
        module = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        imports[module] = list(imported_names(tree, module, path.name == "__init__.py"))
    return imports


def imported_modules(imports: list[tuple[str, tuple[str, ...]]], known: Collection[str]) -> set[str]:
    """The dotted names imported: ``from X import Y`` is X.Y when that is a known module (importing
    a submodule), else X (importing a name from X)."""
    names: set[str] = set()
    for base, taken in imports:
        submodules = {f"{base}.{name}" for name in taken} & set(known)
        names |= submodules
        if len(submodules) < len(taken) or not taken:
            names.add(base)
    return names


def module_graph(imports: Mapping[str, list[tuple[str, tuple[str, ...]]]]) -> dict[str, set[str]]:
    """Only the edges between engine modules. Importing a submodule runs its package's
    ``__init__`` too, but that is not counted as an edge: it is how packages work, not a choice."""
    return {
        module: {name for name in imported_modules(found, imports) if name in imports and name != module}
        for module, found in imports.items()
    }


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle as a path that starts and ends at the same module, or None."""
    state: dict[str, str] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = "done"
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def test_the_engine_never_imports_the_operator() -> None:
    imports = engine_imports()
    offenders = {
        module: sorted(n for n in imported_modules(found, imports) if n.split(".")[0] == "kubejury_operator")
        for module, found in imports.items()
    }
    assert {module: names for module, names in offenders.items() if names} == {}


def test_engine_modules_import_each_other_without_a_cycle() -> None:
    assert find_cycle(module_graph(engine_imports())) is None


def test_the_cycle_finder_finds_a_cycle_through_a_lazy_import(tmp_path: Path) -> None:
    package = tmp_path / ENGINE
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from kubejury.b import thing\n")
    (package / "b.py").write_text("def f():\n    from kubejury import c\n")
    (package / "c.py").write_text("from . import a\n")
    (package / "d.py").write_text("import kubejury_operator.handlers\n")
    imports = engine_imports(tmp_path)
    assert find_cycle(module_graph(imports)) == ["kubejury.a", "kubejury.b", "kubejury.c", "kubejury.a"]
    assert imported_modules(imports["kubejury.d"], imports) == {"kubejury_operator.handlers"}


def package_graph(graph: Mapping[str, set[str]]) -> dict[str, set[str]]:
    """The module graph folded onto the engine's first level: ``kubejury.stats.bias`` counts as
    ``kubejury.stats``; top-level modules (``kubejury.pipeline``) stand for themselves."""

    def first_level(module: str) -> str:
        return ".".join(module.split(".")[:2])

    folded: dict[str, set[str]] = {}
    for module, names in graph.items():
        here = first_level(module)
        folded.setdefault(here, set()).update(first_level(n) for n in names if first_level(n) != here)
    return folded


def test_engine_subpackages_form_layers() -> None:
    """config, files, stats, … depend on each other one way, so each can be read bottom-up
    (docs/architecture.md gives the order)."""
    assert find_cycle(package_graph(module_graph(engine_imports()))) is None
