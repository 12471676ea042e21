"""The module maps in docs/architecture.md and docs/operator.md are true: rendered from the modules.

Each map is the table ``scripts/module_map.py`` renders from every module's docstring (and, for
the operator, the side-effect homes each module imports). A module added, moved or removed, or a
docstring changed, without re-running the script fails here, so the docs cannot drift from the code.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("module_map", ROOT / "scripts" / "module_map.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["module_map"] = module
    spec.loader.exec_module(module)
    return module


MAP = load_script()


@pytest.mark.parametrize("region", [MAP.ENGINE_REGION, MAP.OPERATOR_REGION], ids=lambda r: r.name)
def test_each_committed_module_map_is_what_the_modules_say_today(region: object) -> None:
    assert MAP.current(region) == MAP.rendered(region), "run: python scripts/module_map.py"


def write_module(package: Path, name: str, source: str) -> None:
    path = package / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source, encoding="utf-8")


def test_the_map_lists_every_module_with_the_first_paragraph_of_its_docstring(tmp_path: Path) -> None:
    write_module(tmp_path, "__init__.py", '"""The package."""\n')
    write_module(tmp_path, "alpha.py", '"""Alpha exists so that\nbeta can be small.\n\nDetails."""\n')
    before = MAP.engine_table(tmp_path)
    write_module(tmp_path, "sub/beta.py", '"""Beta | the second."""\n')
    after = MAP.engine_table(tmp_path)
    assert "| `alpha.py` | Alpha exists so that beta can be small. |" in before
    assert "beta" not in before.lower().replace("beta can", "")
    assert "| `sub/beta.py` | Beta \\| the second. |" in after


def test_a_module_without_a_docstring_is_refused_with_its_path(tmp_path: Path) -> None:
    write_module(tmp_path, "nameless.py", "x = 1\n")
    with pytest.raises(SystemExit, match=r"nameless\.py"):
        MAP.engine_table(tmp_path)


def test_an_operator_module_is_pure_until_it_imports_a_side_effect_home(tmp_path: Path) -> None:
    write_module(tmp_path, "planner.py", '"""Plans."""\nfrom kubejury_operator.gateway import TIMEOUT\n')
    assert "| `planner.py` | Plans. | none (pure) |" in MAP.operator_table(tmp_path)
    write_module(
        tmp_path,
        "planner.py",
        '"""Plans."""\ndef f():\n    from kubejury_operator.gateway import KubeGateway\n',
    )
    assert "| `planner.py` | Plans. | Kubernetes API (through `gateway`) |" in MAP.operator_table(tmp_path)


def test_a_region_without_its_markers_is_reported_with_the_document(tmp_path: Path) -> None:
    document = tmp_path / "doc.md"
    document.write_text("# no map here\n", encoding="utf-8")
    with pytest.raises(SystemExit, match=r"doc\.md"):
        MAP.current(MAP.Region(document, "engine"))
