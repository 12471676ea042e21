"""Where each model's inference server can run: GPU-node parsing and the placement planner.

Depends only on the spec, so both the operator (which applies the plan) and ``kubejury plan``
(which prints it without a cluster) import it from here.
"""
