"""What `vf-eval scaling-book` loads: the verifiers v1 taskset (`taskset`), the env with a local
subprocess runtime (`runtime`) and the in-process single-turn chat harness (`harness`).

Importing this package does not import verifiers; its modules do.
"""
