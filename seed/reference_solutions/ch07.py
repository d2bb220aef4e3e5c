"""Reference solutions for the chapter 7 code items (All About Transformer Inference).

Each function is self-contained (stdlib only) and organised differently from its task docstring:
the decode step is assembled from per-component byte and FLOP budgets, the model-parallel limit is
found by equating the two per-matmul times, and the latency check compares per-hop payload time with
the fixed hop overhead.
"""


def ref_decode_step_time(batch_size, kv_cache_bytes_per_sequence, param_count, bytes_per_param,
                         num_chips, hbm_bytes_per_s_per_chip, flops_per_s_per_chip):
    # aggregate machine
    bandwidth = num_chips * hbm_bytes_per_s_per_chip
    compute = num_chips * flops_per_s_per_chip
    # attention: every sequence brings its own cache, so nothing amortises -> pure bandwidth
    kv_bytes = batch_size * kv_cache_bytes_per_sequence
    t_attention = kv_bytes / bandwidth
    # weight matmuls: either streaming the weights or doing the multiply-adds, whichever is slower
    t_weights_load = (param_count * bytes_per_param) / bandwidth
    t_weights_math = (2.0 * param_count * batch_size) / compute
    t_mlp = t_weights_load if t_weights_load > t_weights_math else t_weights_math
    return t_attention + t_mlp


def ref_model_parallel_limit(d_ff, batch_size, hbm_bytes_per_s, ici_bytes_per_s):
    # per chip and per unit D: weight shard bytes (bf16) = 2 * F / Y, activation bytes over ICI = 2 * B.
    # HBM time 2F / (Y * W_hbm) equals ICI time 2B / W_ici at the limit; solve for Y.
    hbm_over_ici = hbm_bytes_per_s / ici_bytes_per_s
    return d_ff / (batch_size * hbm_over_ici)


def ref_comms_latency_bound(total_bytes, num_shards, ici_bytes_per_s, per_hop_overhead_s):
    # each hop moves one shard's worth of bytes
    per_hop_payload_s = (total_bytes / num_shards) / ici_bytes_per_s
    return bool(per_hop_payload_s < per_hop_overhead_s)
