"""The statistics of the method, pure functions over a score cube (model × question × judge).

Scores and tiers, bootstrap uncertainty, series comparison, judge agreement, bias, agreement with
experts and model selection. No I/O: tables are turned into cubes by ``kubejury.files.tables``.
"""
