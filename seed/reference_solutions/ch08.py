"""Reference solutions for the chapter 8 code items (Serving LLaMA 3-70B on TPUs).

Self-contained (stdlib only). The throughput item is computed as tokens per second over the whole
slice converted to queries, rather than through a per-step latency; the slice-sizing item doubles a
chip count until the memory fits instead of taking a logarithm.
"""


def ref_decode_qps_per_chip(param_count, bytes_per_value, n_layers, n_kv_heads, d_head, context_len,
                            num_chips, hbm_capacity_bytes_per_chip, hbm_bytes_per_s_per_chip, decode_len):
    weight_bytes = param_count * bytes_per_value
    per_token_cache = n_layers * n_kv_heads * d_head * bytes_per_value * 2  # keys + values
    per_request_cache = per_token_cache * context_len
    free_bytes = num_chips * hbm_capacity_bytes_per_chip - weight_bytes
    batch = int(free_bytes // per_request_cache)  # whole sequences only
    # every step streams all weights and all resident caches through the slice's HBM bandwidth
    bytes_per_step = weight_bytes + batch * per_request_cache
    steps_per_s = num_chips * hbm_bytes_per_s_per_chip / bytes_per_step
    tokens_per_s = batch * steps_per_s
    queries_per_s = tokens_per_s / decode_len
    return queries_per_s / num_chips


def ref_min_pow2_chips(param_count, bytes_per_value, n_layers, n_kv_heads, d_head, context_len, batch_size,
                       hbm_bytes_per_chip):
    cache_values = 2 * n_layers * n_kv_heads * d_head * context_len * batch_size  # K and V entries
    needed = (param_count + cache_values) * bytes_per_value
    chips = 1
    while chips * hbm_bytes_per_chip < needed:  # double until it fits; avoids float log2 edge cases
        chips *= 2
    return chips
