"""Records that cross a process boundary: one frozen, typed definition both sides import.

Why this package exists: a stage Job writes a record to storage and the operator, another process
in another Pod, reads it back. When each side spelt the record its own way, they drifted apart
(the operator once ignored the ``succeeded`` state every stage writes, so finished work looked
unfinished). Each record here has exactly one writer format (``to_json``) and one reader
(``from_json``), and tests feed the writer's output to the reader.
"""
