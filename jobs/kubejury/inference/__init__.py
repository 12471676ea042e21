"""Talking to OpenAI-compatible model servers: the HTTP client, its endpoint pool and retries, and
the sampling parameters sent with each request. The engine's one home of HTTP-to-model calls.
"""
