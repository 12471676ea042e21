"""kubejury: evaluate open-weight LLMs on professional-domain questions with a jury of LLM judges.

The engine package: data contracts, the study's scoring method and the statistics it lacked,
OpenAI-compatible generation and judging, storage, reports and the ``kubejury`` CLI. It runs
inside the operator's Jobs and, unchanged, on a laptop (local mode).
"""

from __future__ import annotations

__version__ = "0.1.0"
