"""Errors a user can act on.

Every error about user input names where the problem is (file, line or row, field) so that the
message alone is enough to fix it. The CLI prints these without a traceback and exits non-zero.
"""

from __future__ import annotations


class KubejuryError(Exception):
    """Base class for errors the CLI reports as a one-line message (exit code 2)."""


class InputError(KubejuryError):
    """Bad user input: a benchmark, judgments, answers, experts or spec file that cannot be used.

    ``source`` is the file (or URI); ``location`` is ``"line 12"``, ``"row 3"`` or ``None``;
    ``field`` is the offending field or column, or ``None``.
    """

    def __init__(
        self,
        source: str,
        message: str,
        *,
        location: str | None = None,
        field: str | None = None,
    ) -> None:
        self.source = source
        self.location = location
        self.field = field
        self.detail = message
        where = source
        if location:
            where += f", {location}"
        if field:
            where += f", field '{field}'"
        super().__init__(f"{where}: {message}")


class ConfigError(KubejuryError):
    """A scoring or run configuration that cannot be applied to the data (e.g. a level without a weight)."""


class SpecChanged(ConfigError):
    """The spec changed in a way that makes a stage's stored records stale; nothing was written."""
