"""Shared derivation functions for seed targets.

Each function is arithmetic the book states, with units in its name and docstring. Chapter content
adds functions here when two or more items use the same formula; a formula used by one item stays in
that item's expression.
"""

from __future__ import annotations


def roofline_time_s(flops: float, bytes_moved: float, flops_per_s: float, bytes_per_s: float) -> float:
    """Lower-bound time in seconds of an op: max(T_math, T_comms) (ch1, Where Does the Time Go?)."""
    return max(flops / flops_per_s, bytes_moved / bytes_per_s)


def critical_intensity_flops_per_byte(flops_per_s: float, bytes_per_s: float) -> float:
    """Arithmetic intensity in FLOPs/byte above which an op is compute-bound (ch1, Where Does the Time Go?)."""
    return flops_per_s / bytes_per_s
