"""Reading YAML and JSON that a user (or an attacker) wrote, in bounded time and memory.

Why this module exists: the standard loaders trust their input. PyYAML expands aliases (a
537-byte "billion laughs" document grew past 1.5 GB), keeps the last of two equal keys without a
word, and recurses once per nesting level, as does :func:`json.loads` (``RecursionError``);
Python refuses to turn more than 4,300 digits into an ``int`` (``ValueError``). Every parser of
user files (spec, benchmark, judgments, nodes file) goes through here, so each of those inputs
becomes an :class:`~kubejury.errors.InputError` naming the file, line and, where known, field.

The limits are far beyond any real spec or benchmark: nesting :data:`MAX_DEPTH` levels, integers
of :data:`MAX_INT_DIGITS` digits.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import yaml
from yaml.constructor import ConstructorError
from yaml.events import AliasEvent
from yaml.nodes import MappingNode, Node, ScalarNode

from kubejury.errors import InputError

MAX_DEPTH = 64
"""Nesting levels allowed in a YAML or JSON document (a spec needs fewer than ten)."""
MAX_INT_DIGITS = 30
"""Digits allowed in one integer (counts, seeds and ids fit; 5,000 digits do not)."""


# ------------------------------------------------------------------------------------------- YAML


class _BoundedLoader(yaml.SafeLoader):
    """A safe loader without aliases, with a depth cap and with duplicate keys as errors."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        if self.check_event(AliasEvent):
            event = self.peek_event()  # type: ignore[no-untyped-call]
            raise _Problem(
                event.start_mark.line + 1,
                f"YAML aliases (*{event.anchor}) are not allowed in kubejury files; write the value out",
            )
        self._depth += 1
        if self._depth > MAX_DEPTH:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _Problem(mark.line + 1, f"nested more than {MAX_DEPTH} levels deep")
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, int] = {}
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            line = key_node.start_mark.line + 1
            try:
                first = seen.get(key)
            except TypeError:  # an unhashable key: the base class reports it
                continue
            if first is not None:
                raise _Problem(line, f"key {key!r} appears twice (first at line {first})")
            seen[key] = line
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node: ScalarNode) -> int:
        digits = sum(ch.isdigit() for ch in str(node.value))
        if digits > MAX_INT_DIGITS:
            raise _Problem(
                node.start_mark.line + 1, f"an integer of {digits} digits (at most {MAX_INT_DIGITS})"
            )
        return super().construct_yaml_int(node)


_BoundedLoader.add_constructor("tag:yaml.org,2002:int", _BoundedLoader.construct_yaml_int)


class _Problem(Exception):
    def __init__(self, line: int, message: str) -> None:
        super().__init__(message)
        self.line = line
        self.message = message


def load_yaml(text: str, source: str) -> tuple[Any, Node | None]:
    """The data of a one-document YAML text and its node tree (for line numbers).

    Raises :class:`InputError` for invalid YAML, aliases, duplicate keys, nesting deeper than
    :data:`MAX_DEPTH` and integers longer than :data:`MAX_INT_DIGITS` digits.
    """
    try:
        loader = _BoundedLoader(text)  # the reader already refuses control characters here
    except yaml.YAMLError as exc:
        raise InputError(source, f"not valid YAML: {exc}") from None
    try:
        node = loader.get_single_node()
        data = loader.construct_document(node) if node is not None else None
    except _Problem as bounded:
        raise InputError(source, bounded.message, location=f"line {bounded.line}") from None
    except (yaml.YAMLError, ConstructorError) as exc:
        mark = getattr(exc, "problem_mark", None)
        location = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else None
        problem = getattr(exc, "problem", None) or str(exc)
        raise InputError(source, f"not valid YAML: {problem}", location=location) from None
    except (RecursionError, ValueError) as exc:
        raise InputError(source, f"not usable YAML: {exc}") from None
    finally:
        loader.dispose()
    return data, node


# ------------------------------------------------------------------------------------------- JSON


def _bounded_int(text: str) -> int:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        raise _JsonProblem(f"an integer of {digits} digits (at most {MAX_INT_DIGITS})")
    return int(text)


class _JsonProblem(ValueError):
    pass


def _nesting(text: str) -> int:
    """The deepest bracket nesting of a JSON text (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in text:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def loads_json(text: str | bytes, source: str, location: str | None = None) -> Any:
    """:func:`json.loads` with the limits above; any problem is an :class:`InputError`.

    A malformed document raises :class:`json.JSONDecodeError` as before (callers word it with
    the column), so only the new failure modes are translated here.
    """
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if text.count("[") + text.count("{") > MAX_DEPTH and _nesting(text) > MAX_DEPTH:
        raise InputError(source, f"nested more than {MAX_DEPTH} levels deep", location=location)
    try:
        return json.loads(text, parse_int=_bounded_int)
    except _JsonProblem as exc:
        raise InputError(source, str(exc), location=location) from None
    except RecursionError:
        raise InputError(source, "nested too deeply", location=location) from None


def split_lines(text: str) -> Iterator[tuple[int, str]]:
    """(physical line number, line) of a JSONL text, split on ``\\n`` only.

    ``str.splitlines`` also splits on U+2028, U+0085 and other separators that JSON allows inside
    a string, which cut a valid record in two and shifted every later line number.
    """
    for number, line in enumerate(text.split("\n"), start=1):
        yield number, line.removesuffix("\r")
