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
    imports = _synthetic_engine(
        tmp_path,
        {
            "a.py": "from kubejury.b import thing\n",
            "b.py": "def f():\n    from kubejury import c\n",
            "c.py": "from . import a\n",
            "d.py": "import kubejury_operator.handlers\n",
        },
    )
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


# ------------------------------------------------------------------------------ layer contracts

#: The middle row of the diagram, "parts": the pieces the work is built from.
PARTS = frozenset(
    {
        "kubejury.config",
        "kubejury.files",
        "kubejury.inference",
        "kubejury.judging",
        "kubejury.records",
        "kubejury.stats",
    }
)

#: The rows of the engine's diagram in docs/architecture.md, top to bottom: a package may import
#: its own row and the rows below it, never a row above. ``testing`` (test doubles that are real
#: servers) sits on top because only tests and benchmarks may use it. Not drawn in the diagram yet,
#: placed by what they are and what imports them: ``provenance`` (pipeline's record of what a run
#: used: work), ``runtimes`` (the serving runtimes' names and facts, importing only ``errors``: vocabulary),
#: ``safe_input`` (YAML/JSON readers below config and files: vocabulary) and the package root
#: ``kubejury`` (``__version__``: vocabulary).
ENGINE_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("test doubles", frozenset({"kubejury.testing"})),
    ("entry points", frozenset({"kubejury.cli", "kubejury.commands", "kubejury.pipeline"})),
    (
        "work",
        frozenset(
            {
                "kubejury.stages",
                "kubejury.report",
                "kubejury.placement",
                "kubejury.local",
                "kubejury.provenance",
            }
        ),
    ),
    ("parts", PARTS),
    (
        "vocabulary",
        frozenset(
            {
                "kubejury",
                "kubejury.errors",
                "kubejury.modelinfo",
                "kubejury.jsonable",
                "kubejury.redact",
                "kubejury.safe_input",
                "kubejury.runtimes",
            }
        ),
    ),
)

#: Orders inside one row, from the prose under the diagram: ``stats`` sits below ``config`` (the
#: spec embeds the scoring configuration) and ``files`` (tables become ScoreCubes); ``records``
#: (documents that cross a process) imports nothing of its row but ``stats``, so a reader in another
#: process loads no part of the engine's work. Package → the packages of its own row it must not import.
SAME_ROW_FORBIDDEN: Mapping[str, frozenset[str]] = {
    "kubejury.stats": frozenset({"kubejury.config", "kubejury.files"}),
    "kubejury.records": PARTS - {"kubejury.records", "kubejury.stats"},
}

#: The operator's rows, top to bottom (docs/architecture.md, "The operator"): a module may import its
#: own row and the rows below it, never one above. ``wiring`` is kopf's side (the handlers and their
#: settings); ``orchestration`` does one reconcile with side effects, through the homes; ``homes``
#: are the one place of each side effect (Kubernetes calls, stored results, metrics; ``testing`` is
#: the in-memory stand-in for the gateway); ``core`` is pure: the planner, its vocabulary and
#: settings, the caches' entries, admission, the previews. Every operator module has a row.
OPERATOR_ROOT = ENGINE_ROOT.parent / "operator"
OPERATOR = "kubejury_operator"


def _operator_row(*names: str) -> frozenset[str]:
    return frozenset(f"{OPERATOR}.{name}" for name in names)


OPERATOR_LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("wiring", _operator_row("__main__", "handlers", "kopf_setup")),
    ("orchestration", _operator_row("reconciler", "apply", "observe", "runtime")),
    ("homes", _operator_row("gateway", "run_storage", "metrics", "testing")),
    (
        "core",
        frozenset({OPERATOR})
        | _operator_row(
            "chart_defaults",
            "cluster_run",
            "crd",
            "expectations",
            "facts",
            "gpu_accounting",
            "images",
            "kube_api",
            "lanes",
            "looks",
            "manifests",
            "memory",
            "observed",
            "oom_retry",
            "placing",
            "prefetching",
            "preview",
            "progress_cache",
            "queue_observed",
            "queueing",
            "reconcile",
            "settings",
            "status",
            "tenancy",
            "validation",
            "vocabulary",
            "watched",
            "work_queue",
        ),
    ),
)
#: Third-party packages that are side effects in themselves: only rows above ``core`` import them.
OPERATOR_SIDE_EFFECT_PACKAGES = frozenset({"kopf", "aiohttp", "prometheus_client", "boto3", "botocore"})


def first_level(module: str, root: str) -> str:
    """``kubejury.stats.bias`` → ``kubejury.stats``; ``kubejury`` stays itself."""
    return ".".join(module.split(".")[:2]) if module.startswith(f"{root}.") else module


def layer_rows(layers: tuple[tuple[str, frozenset[str]], ...]) -> dict[str, int]:
    """Package → its row number (0 is the top row)."""
    return {package: row for row, (_, packages) in enumerate(layers) for package in packages}


def unplaced_packages(
    imports: Mapping[str, list[tuple[str, tuple[str, ...]]]], layers: tuple[tuple[str, frozenset[str]], ...]
) -> list[str]:
    """First-level engine packages that no row of the contract names (a new package must be placed)."""
    rows = layer_rows(layers)
    return sorted({first_level(m, ENGINE) for m in imports} - set(rows))


def layer_violations(
    imports: Mapping[str, list[tuple[str, tuple[str, ...]]]],
    layers: tuple[tuple[str, frozenset[str]], ...] = ENGINE_LAYERS,
    same_row_forbidden: Mapping[str, frozenset[str]] = SAME_ROW_FORBIDDEN,
) -> list[str]:
    """Every import that breaks the contract, one readable line each:
    ``kubejury.records.run_status (parts) imports kubejury.placement.decision (work)``."""
    rows = layer_rows(layers)
    names = [name for name, _ in layers]
    found: list[str] = []
    for module, targets in sorted(module_graph(imports).items()):
        here = first_level(module, ENGINE)
        for target in sorted(targets):
            there = first_level(target, ENGINE)
            if here == there or here not in rows or there not in rows:
                continue
            above = rows[there] < rows[here]
            if above or there in same_row_forbidden.get(here, frozenset()):
                found.append(f"{module} ({names[rows[here]]}) imports {target} ({names[rows[there]]})")
    return found


def operator_imports(root: Path = OPERATOR_ROOT) -> dict[str, set[str]]:
    """Operator module → the modules it imports (operator modules and third-party packages)."""
    graph: dict[str, set[str]] = {}
    for path in sorted((root / OPERATOR).rglob("*.py")):
        module = module_name(path, root)
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        found = list(imported_names(tree, module, path.name == "__init__.py"))
        graph[module] = {first_level(name, OPERATOR) for name in imported_modules(found, ())} | {
            f"{base}.{name}" for base, taken in found if base == OPERATOR for name in taken
        }
    return graph


def operator_violations(
    graph: Mapping[str, set[str]], layers: tuple[tuple[str, frozenset[str]], ...] = OPERATOR_LAYERS
) -> list[str]:
    """Each operator import that runs upward, or from the pure core into a side-effect package, one
    readable line each: ``kubejury_operator.reconcile (core) imports kubejury_operator.apply (orchestration)``."""
    rows = {module: row for row, (_, modules) in enumerate(layers) for module in modules}
    names = [name for name, _ in layers]
    core = len(layers) - 1
    found: list[str] = []
    for module in sorted(graph):
        for target in sorted(graph[module]):
            if module in rows and target in rows and rows[target] < rows[module]:
                found.append(f"{module} ({names[rows[module]]}) imports {target} ({names[rows[target]]})")
            elif rows.get(module) == core and target.split(".")[0] in OPERATOR_SIDE_EFFECT_PACKAGES:
                found.append(f"{module} ({names[core]}) imports {target} (side effects)")
    return found


def unplaced_operator_modules(
    graph: Mapping[str, set[str]], layers: tuple[tuple[str, frozenset[str]], ...] = OPERATOR_LAYERS
) -> tuple[list[str], list[str]]:
    """Operator modules no row names, and rows' modules that no longer exist."""
    placed = {module for _, modules in layers for module in modules}
    return sorted(set(graph) - placed), sorted(placed - set(graph))


def test_every_engine_package_has_a_row_in_the_layer_contract() -> None:
    assert unplaced_packages(engine_imports(), ENGINE_LAYERS) == []


def test_no_engine_module_imports_a_higher_row_of_the_architecture_diagram() -> None:
    assert layer_violations(engine_imports()) == []


def test_every_operator_module_has_a_row_and_every_row_names_a_module() -> None:
    assert unplaced_operator_modules(operator_imports()) == ([], [])


def test_no_operator_module_imports_a_higher_row_and_the_core_imports_no_side_effect() -> None:
    assert operator_violations(operator_imports()) == []


def write_package(tmp_path: Path, package: str, files: Mapping[str, str]) -> Path:
    """A package of modules with the given source under ``tmp_path`` (its ``__init__`` empty unless
    given); returns ``tmp_path``, the root to read its imports from."""
    for relative, text in {"__init__.py": "", **files}.items():
        path = tmp_path / package / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _synthetic_engine(
    tmp_path: Path, files: Mapping[str, str]
) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    return engine_imports(write_package(tmp_path, ENGINE, files))


def test_the_layer_check_names_a_lower_row_that_imports_a_higher_one_even_lazily(tmp_path: Path) -> None:
    imports = _synthetic_engine(
        tmp_path,
        {
            "errors.py": "",
            "records/__init__.py": "",
            "records/run_status.py": "def f():\n    from kubejury.placement.decision import Placement\n",
            "placement/__init__.py": "",
            "placement/decision.py": "from kubejury.errors import InputError\n",
            "stats/__init__.py": "from ..config import spec\n",
            "config/__init__.py": "",
            "config/spec.py": "from kubejury import stats\n",
        },
    )
    assert layer_violations(imports) == [
        "kubejury.records.run_status (parts) imports kubejury.placement.decision (work)",
        "kubejury.stats (parts) imports kubejury.config.spec (parts)",
    ]


def test_the_layer_check_names_a_package_the_contract_does_not_place(tmp_path: Path) -> None:
    imports = _synthetic_engine(tmp_path, {"errors.py": "", "newthing/__init__.py": "", "newthing/a.py": ""})
    assert unplaced_packages(imports, ENGINE_LAYERS) == ["kubejury.newthing"]


def test_the_operator_check_names_an_upward_import_even_into_orchestration(tmp_path: Path) -> None:
    files = {
        "reconcile.py": "from kubejury_operator import apply\nimport kopf\n",
        "apply.py": "def f():\n    from kubejury_operator.handlers import register\n",
        "handlers.py": "from kubejury_operator import reconcile\n",
        "status.py": "from kubejury_operator.reconcile import plan\n",
    }
    graph = operator_imports(write_package(tmp_path, OPERATOR, files))
    assert operator_violations(graph) == [
        "kubejury_operator.apply (orchestration) imports kubejury_operator.handlers (wiring)",
        "kubejury_operator.reconcile (core) imports kopf (side effects)",
        "kubejury_operator.reconcile (core) imports kubejury_operator.apply (orchestration)",
    ]
    unplaced, missing = unplaced_operator_modules({**graph, f"{OPERATOR}.newthing": set()})
    assert unplaced == [f"{OPERATOR}.newthing"]
    assert f"{OPERATOR}.gateway" in missing
