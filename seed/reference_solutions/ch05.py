"""Reference solutions for the chapter 5 code items ("How to Parallelize a Transformer for Training").

Each function is self-contained (plain Python, no imports) and deliberately written differently from the
task docstrings: the arithmetic is split into named partial terms (bytes moved, FLOPs done) rather
than the closed forms the book prints, so a reference passing its tests says the tests are right.
"""


def ref_dp_backward_layer_time_s(batch_tokens, d_model, d_ff, num_chips, flops_per_s, ici_bytes_per_s):
    """Pure data parallelism, backward pass of one two-matrix MLP layer: max(compute, AllReduce) in s."""
    weights_per_matrix = d_model * d_ff
    local_tokens = batch_tokens / num_chips
    # Backward pass: two matmuls per weight matrix (dW and dX), each 2 * tokens * params FLOPs.
    flops = 2 * (2 * 2 * local_tokens * weights_per_matrix)
    compute = flops / flops_per_s
    # One gradient AllReduce per matrix (bf16: 2 bytes/param); a ring AllReduce moves 2x the array.
    grad_bytes = 2 * weights_per_matrix
    comms = 2 * (2 * grad_bytes / ici_bytes_per_s)
    return compute if compute > comms else comms


def ref_fsdp_tp_forward_layer_time_s(batch_tokens, d_model, d_ff, fsdp_ways, tp_ways, fsdp_axes, tp_axes,
                                     flops_per_s, ici_bytes_per_s):
    """Mixed FSDP (X) + tensor parallelism (Y), forward pass of one MLP layer: slowest of the three in s."""
    chips = fsdp_ways * tp_ways
    matmul_flops = 2 * (2.0 * batch_tokens * d_model * d_ff) / chips
    t_compute = matmul_flops / flops_per_s
    # FSDP gathers W_in[D, F_Y] and W_out[F_Y, D]: two bf16 arrays of D*F/Y entries each.
    gathered_weight_bytes = 2 * (2.0 * d_model * d_ff / tp_ways)
    t_weights = gathered_weight_bytes / (ici_bytes_per_s * fsdp_axes)
    # TP gathers In[B_X, D] and reduce-scatters Out[B_X, D]: two bf16 arrays of B*D/X entries each.
    moved_activation_bytes = 2 * (2.0 * batch_tokens * d_model / fsdp_ways)
    t_activations = moved_activation_bytes / (ici_bytes_per_s * tp_axes)
    return max([t_compute, t_weights, t_activations])


def ref_optimal_fsdp_ways(batch_tokens, d_ff, num_chips, fsdp_axes, tp_axes):
    """FSDP degree X that balances FSDP weight comms against TP activation comms (X*Y = num_chips)."""
    # Balance F*X/(N*M_X) = B/(X*M_Y)  =>  X^2 = B*N*M_X / (F*M_Y).
    x_squared = (batch_tokens * num_chips * fsdp_axes) / (d_ff * tp_axes)
    return x_squared ** 0.5
