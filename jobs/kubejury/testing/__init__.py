"""Test doubles that are real servers: kubejury's own tests and benchmarks run against them on loopback."""
