"""Reference solutions for the chapter 2 code items ("How to Think About TPUs").

Stdlib only; every function stands alone (no shared helpers). Deliberately unlike the task
docstrings: throughput is derived from the MXU's per-8-cycle tile (bf16[8, S] @ bf16[S, S]) rather
than from a per-cycle formula, and hop counts walk each axis instead of using a closed form.
"""


def peak_mxu_flops_ref(mxu_side, mxus_per_core, cores_per_chip, clock_hz):
    # One saturated MXU finishes an [8, S] x [S, S] tile every 8 cycles.
    rows_per_tile, cycles_per_tile = 8, 8
    multiply_adds_per_tile = rows_per_tile * mxu_side * mxu_side
    flops_per_cycle_one_mxu = 2 * multiply_adds_per_tile / cycles_per_tile
    units = mxus_per_core * cores_per_chip
    return flops_per_cycle_one_mxu * units * clock_hz


def ici_hops_ref(src, dst, shape, wraparound):
    total = 0
    for here, there, extent, is_ring in zip(src, dst, shape, wraparound):
        forward = (there - here) % extent  # steps going "up" the axis, wrapping if allowed
        if is_ring:
            backward = extent - forward if forward else 0
            total += forward if forward <= backward else backward
        else:
            step = 1 if there >= here else -1
            position, walked = here, 0
            while position != there:
                position += step
                walked += 1
            total += walked
    return total
