"""Reference solutions for the chapter 4 code items (Transformer accounting).

Each function is self-contained (stdlib only) and deliberately organised differently from the task
docstrings: parameters are tallied matrix by matrix, FLOPs are built from per-matmul costs, and the KV
cache is sized as one per-token slab times the number of cached tokens.
"""


def ref_count_transformer_params(d_model, d_ff, n_layers, n_heads, n_kv_heads, d_head, vocab):
    # list every weight matrix of one layer as (rows, cols)
    q_width = n_heads * d_head
    kv_width = n_kv_heads * d_head
    layer_shapes = [
        (d_model, d_ff),      # W_in1 (gate)
        (d_model, d_ff),      # W_in2 (up)
        (d_ff, d_model),      # W_out (down)
        (d_model, q_width),   # W_Q
        (d_model, kv_width),  # W_K
        (d_model, kv_width),  # W_V
        (q_width, d_model),   # W_O
    ]
    layer_total = sum(rows * cols for rows, cols in layer_shapes) + d_model  # + one norm scale vector
    embed = vocab * d_model
    unembed = d_model * vocab
    return n_layers * layer_total + embed + unembed


def ref_attention_flops_ratio(seq_len, d_model, d_ff, n_heads, n_kv_heads, d_head):
    # everything per sequence; the batch cancels. Training costs 3x the forward matmul FLOPs,
    # and that factor also cancels, so count forward multiply-adds (2 FLOPs each) only.
    def mm(rows, contract, cols):
        return 2.0 * rows * contract * cols

    tokens = seq_len
    weight_flops = 0.0
    weight_flops += 3 * mm(tokens, d_model, d_ff)                 # gate, up, down
    weight_flops += 2 * mm(tokens, d_model, n_heads * d_head)     # Q and O
    weight_flops += 2 * mm(tokens, d_model, n_kv_heads * d_head)  # K and V
    per_head_scores = mm(seq_len, d_head, seq_len)                # q . k^T
    per_head_mix = mm(seq_len, seq_len, d_head)                   # probs . v
    dot_flops = n_heads * (per_head_scores + per_head_mix)
    return dot_flops / weight_flops


def ref_kv_cache_bytes(batch, seq_len, n_layers, n_kv_heads, d_head, bytes_per_value):
    one_head_one_token = d_head * bytes_per_value
    keys_per_token = n_layers * n_kv_heads * one_head_one_token
    per_token = keys_per_token + keys_per_token  # values are the same size as keys
    cached_tokens = batch * seq_len
    return per_token * cached_tokens
