"""The chart's README is what helm-docs writes from values.yaml, and every value has a description.

helm-docs (a Go command, built at the version pinned in the Makefile by ``make helm-docs`` into
~/.cache/kubejury/bin) regenerates the README into a copy of the chart; the committed file must be
byte-identical. The flags come from the Makefile's HELM_DOCS_ARGS, so ``make chart-docs`` and this
test cannot disagree. Nothing is skipped when helm-docs is missing: the test fails and says how to
get it.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "kubejury"


def _makefile_variable(name: str) -> str:
    match = re.search(rf"^{name} := (.*)$", (ROOT / "Makefile").read_text(encoding="utf-8"), re.MULTILINE)
    assert match, f"Makefile defines no {name}"
    return match.group(1).strip()


def _helm_docs() -> str:
    cache = Path(os.environ.get("KUBEJURY_CACHE", Path.home() / ".cache" / "kubejury")).expanduser()
    candidate = cache / "bin" / "helm-docs"
    if candidate.is_file():
        return str(candidate)
    found = shutil.which("helm-docs")
    if found is None:
        pytest.fail(
            "helm-docs is not built: run `make helm-docs` (Go module proxy, cached in ~/.cache/kubejury/bin)"
        )
    return found


def _copy_chart(into: Path) -> Path:
    """A copy of the chart under ``into/charts`` without its README; returns ``into/charts``."""
    copy = into / "charts" / "kubejury"
    shutil.copytree(CHART, copy)
    (copy / "README.md").unlink(missing_ok=True)
    return into / "charts"


def _helm_docs_readme(charts: Path) -> str:
    """Run helm-docs with the Makefile's flags over ``charts`` and return kubejury's README.md."""
    args = _makefile_variable("HELM_DOCS_ARGS").split()
    args[args.index("--chart-search-root") + 1] = str(charts)
    done = subprocess.run([_helm_docs(), *args], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return (charts / "kubejury" / "README.md").read_text(encoding="utf-8")


def _regenerate(into: Path) -> str:
    return _helm_docs_readme(_copy_chart(into))


def _values_rows(readme: str) -> dict[str, str]:
    """Key → description of the README's values table."""
    rows: dict[str, str] = {}
    for line in readme.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) >= 4 and cells[1] in {"string", "int", "float", "bool", "list", "object"}:
            rows[cells[0]] = cells[-1]
    return rows


def test_the_committed_readme_is_what_helm_docs_writes(tmp_path: Path) -> None:
    generated = _regenerate(tmp_path)
    committed = (CHART / "README.md").read_text(encoding="utf-8")
    assert committed == generated, (
        "charts/kubejury/README.md is out of date with values.yaml: run `make chart-docs` and commit it"
    )


def test_every_value_in_the_table_has_a_description(tmp_path: Path) -> None:
    rows = _values_rows(_regenerate(tmp_path))
    assert rows, "no values table in the generated README"
    undocumented = sorted(key for key, description in rows.items() if not description)
    assert not undocumented, f"values.yaml entries without a `# --` comment: {undocumented}"


def test_every_top_level_value_appears_in_the_table() -> None:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    rows = _values_rows((CHART / "README.md").read_text(encoding="utf-8"))
    missing = [key for key in values if not any(row == key or row.startswith(f"{key}.") for row in rows)]
    assert not missing, f"top-level values missing from the chart README: {missing}"


def test_a_changed_comment_changes_the_generated_readme(tmp_path: Path) -> None:
    """The comparison above can fail: editing one value's comment changes the generated table."""
    charts = _copy_chart(tmp_path)
    values = charts / "kubejury" / "values.yaml"
    text = values.read_text(encoding="utf-8")
    assert "# -- Labels added to every object" in text
    values.write_text(text.replace("# -- Labels added to every object", "# -- Labels put on every object"))
    assert _helm_docs_readme(charts) != (CHART / "README.md").read_text(encoding="utf-8")
