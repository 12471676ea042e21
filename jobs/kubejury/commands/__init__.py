"""Subcommands of the ``kubejury`` CLI, one module each (see ``kubejury.cli``)."""
