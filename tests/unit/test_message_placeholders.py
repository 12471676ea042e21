"""No user-facing message prints its own template: every ``{name}`` in an error message is filled in.

A string literal with ``{value!r}`` or ``{name}`` that is not an f-string (and not given to
``.format``) reaches the user verbatim — ``unknown quantization {value!r}`` was one. This scans
the source of the engine and the operator for such literals inside anything that raises, reports
or prints: exception constructors, ``raise``, ``print``, and ``message=`` / ``reason=`` arguments.
``PydanticCustomError`` fills ``{key}`` from its context dict (without conversions such as ``!r``),
so there a placeholder must name a key of that dict.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Everything a user runs: the engine and its CLI, the operator, the benchmarks, the dev cluster.
SOURCES = [
    REPO / "jobs" / "kubejury",
    REPO / "operator" / "kubejury_operator",
    REPO / "benchmarks",
    REPO / "cluster" / "devcluster",
]
PLACEHOLDER = re.compile(r"(?<!\{)\{([A-Za-z_][A-Za-z0-9_.]*)(![rsa])?(?::[^{}]*)?\}(?!\})")
MESSAGE_CALLS = re.compile(r"(Error|Exception|Warning)$|^(print|fail|warn|warning|error|exit|abort)$")
MESSAGE_KEYWORDS = {"message", "msg", "reason", "detail", "help", "description"}
#: Literal braces that are the product's own vocabulary (the judging template's placeholders,
#: which a message about the template must show as written).
LITERAL_VOCABULARY = {"question", "reference", "answer"}


@dataclass(frozen=True)
class Finding:
    where: str
    literal: str

    def __str__(self) -> str:
        return f"{self.where}: {self.literal}"


def _callee(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    return func.id if isinstance(func, ast.Name) else ""


def _plain_string_tokens(source: str) -> list[tokenize.TokenInfo]:
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    plain = []
    for index, token in enumerate(tokens):
        if token.type != tokenize.STRING:
            continue
        prefix = re.match(r"[A-Za-z]*", token.string)
        if prefix is not None and "f" in prefix.group(0).lower():
            continue
        following = [
            t for t in tokens[index + 1 : index + 8] if t.type not in (tokenize.NL, tokenize.COMMENT)
        ]
        rest = [t for t in following if t.type != tokenize.STRING]
        if len(rest) >= 2 and rest[0].string == "." and rest[1].string in ("format", "format_map"):
            continue  # filled in by .format
        plain.append(token)
    return plain


def _context_keys(node: ast.Call) -> set[str] | None:
    if _callee(node) != "PydanticCustomError":
        return None
    context = node.args[2] if len(node.args) > 2 else None
    if isinstance(context, ast.Dict):
        return {k.value for k in context.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)}
    return set()


def _message_nodes(tree: ast.AST) -> list[tuple[ast.expr, set[str] | None]]:
    nodes: list[tuple[ast.expr, set[str] | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc
            nodes.append((exc, _context_keys(exc) if isinstance(exc, ast.Call) else None))
        elif isinstance(node, ast.Call):
            if MESSAGE_CALLS.search(_callee(node)):
                nodes.append((node, _context_keys(node)))
            nodes += [(kw.value, None) for kw in node.keywords if kw.arg in MESSAGE_KEYWORDS]
    return nodes


def _inside(token: tokenize.TokenInfo, node: ast.expr) -> bool:
    assert node.end_lineno is not None and node.end_col_offset is not None  # ast.parse sets them
    start = (node.lineno, node.col_offset)
    end = (node.end_lineno, node.end_col_offset)
    return start <= token.start and token.end <= end


def unformatted_placeholders(source: str, where: str) -> list[Finding]:
    """Placeholders in ``source`` that would reach a user unformatted, as ``where:line: literal``."""
    tokens = _plain_string_tokens(source)
    findings: dict[tuple[tuple[int, int], str], Finding] = {}
    for node, context_keys in _message_nodes(ast.parse(source)):
        for token in tokens:
            if not _inside(token, node):
                continue
            for match in PLACEHOLDER.finditer(token.string):
                name, conversion = match.group(1), match.group(2)
                if name in LITERAL_VOCABULARY:
                    continue
                if context_keys is not None and conversion is None and name in context_keys:
                    continue
                findings[(token.start, match.group(0))] = Finding(f"{where}:{token.start[0]}", match.group(0))
    return list(findings.values())


def python_files() -> list[Path]:
    return sorted(p for root in SOURCES if root.is_dir() for p in root.rglob("*.py"))


def test_no_message_shows_an_unformatted_placeholder() -> None:
    findings = [
        finding
        for path in python_files()
        for finding in unformatted_placeholders(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert not findings, "messages that print their own template:\n" + "\n".join(map(str, findings))


@pytest.mark.parametrize(
    ("code", "found"),
    [
        ('raise ValueError("bad {value!r}")', ["{value!r}"]),
        ('raise InputError(path, "line {line}: " f"{x}")', ["{line}"]),
        ('print("wrote {uri}", file=sys.stderr)', ["{uri}"]),
        ('x = dict(message="count {n}")', ["{n}"]),
        ('raise PydanticCustomError("q", "unknown {value!r}", {"value": v})', ["{value!r}"]),
        ('raise PydanticCustomError("q", "unknown {other}", {"value": v})', ["{other}"]),
        ('raise PydanticCustomError("q", "unknown {value}", {"value": v})', []),
        ('raise ValueError(f"bad {value!r}")', []),
        ('raise ValueError("bad {value!r}".format(value=v))', []),
        ('raise ValueError("use {{braces}} and {question}")', []),
        ('log = "a {b}"', []),
    ],
)
def test_the_scan_finds_exactly_the_unformatted_ones(code: str, found: list[str]) -> None:
    assert [f.literal for f in unformatted_placeholders(code + "\n", "probe.py")] == found
