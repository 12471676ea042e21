"""Where ``Placement`` used to live; it is a record now: :mod:`kubejury.records.placement`.

Why this module exists: only so that importers not yet switched keep working while issue 22 lands;
the placement logic is in :mod:`kubejury.placement.planner` and :mod:`kubejury.placement.estimate`.
"""

from __future__ import annotations

# moved to kubejury.records.placement; importers outside this change still use it
from kubejury.records.placement import Placement as Placement
