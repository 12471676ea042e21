"""What a run is asked to do: the EvalRun spec (the pydantic model behind the CRD) and its rules.

Everything else reads a run through these types; nothing here does I/O beyond parsing a file.
"""
