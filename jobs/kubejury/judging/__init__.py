"""What a judge sees and says: anonymized, shuffled answers, the judge prompt and the verdict parser.

Pure text in, text out; the judging stage (``kubejury.stages.judge``) sends it through the client.
"""
