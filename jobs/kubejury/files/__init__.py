"""The files a run reads and writes: questions (benchmark), answers and judgments tables, and the
storage they live in (a local directory or an S3 prefix).

The one home of file and S3 I/O for the engine; the statistics and the report only see what these
modules return.
"""
