"""Reference solutions for the chapter 1 code items ("All About Rooflines").

Stdlib only; every function stands alone (no shared helpers). Written unlike the task docstrings on
purpose: byte and FLOP tallies are built up array by array, and the roofline is applied through
per-resource times collected in a dict rather than a single transcribed formula.
"""


def matmul_time_bounds_ref(batch, d_model, d_ff, bytes_per_element, flops_per_s, hbm_bytes_per_s):
    # Every array of the matmul crosses the HBM boundary exactly once: two inputs in, one output out.
    shapes = {"x_in": (batch, d_model), "y_in": (d_model, d_ff), "z_out": (batch, d_ff)}
    traffic = 0
    for rows, cols in shapes.values():
        traffic += rows * cols * bytes_per_element
    # batch * d_ff output entries, each a length-d_model dot product of multiply-adds (2 FLOPs each).
    work = batch * d_ff * d_model * 2
    seconds = {"compute": work / flops_per_s, "memory": traffic / hbm_bytes_per_s}
    overlapped = max(seconds.values())
    serial = sum(seconds.values())
    return [overlapped, serial]


def attainable_flops_per_s_ref(batch, d_model, d_ff, peak_flops_per_s, hbm_bytes_per_s):
    bf16, int8 = 2, 1
    moved = (batch * d_model * bf16      # activations read
             + d_model * d_ff * int8     # quantized weights read
             + batch * d_ff * bf16)      # bf16 result written
    work = 2.0 * batch * d_model * d_ff
    t_compute = work / peak_flops_per_s
    t_memory = moved / hbm_bytes_per_s
    runtime = t_compute if t_compute >= t_memory else t_memory
    return work / runtime
