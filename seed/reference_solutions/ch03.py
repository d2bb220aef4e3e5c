"""Reference solutions for the chapter 3 code items ("Sharded Matrices and How to Multiply Them").

Stdlib only; each function is self-contained (no helper shared between them). The style here is
deliberately unlike the task docstrings: lookup tables and explicit loops rather than a formula
transcribed from the prompt.
"""


def local_shard_shape_ref(global_shape, dim_axes, mesh_axis_names, mesh_axis_sizes):
    # Each letter in a dimension's spec names a mesh axis; the dimension is split by the product of
    # the sizes of every mesh axis it mentions. Mesh axes not mentioned anywhere only replicate.
    size_of = {}
    for name, size in zip(mesh_axis_names, mesh_axis_sizes):
        size_of[name] = size
    local = []
    for extent, spec in zip(global_shape, dim_axes):
        ways = 1
        for letter in spec:
            ways = ways * size_of[letter]
        local.append(extent // ways)
    return local


def collective_time_ref(op, array_bytes, num_axes, ici_bidi_bytes_per_s):
    # Multipliers relative to one "pass" of the whole array through the links of the rings in use:
    # AllGather and ReduceScatter move the array once, AllReduce = ReduceScatter + AllGather moves it
    # twice, and an AllToAll on a bidirectional ring moves only a quarter of it.
    passes = {"AllGather": 1.0, "ReduceScatter": 1.0, "AllReduce": 2.0, "AllToAll": 0.25}[op]
    aggregate_bandwidth = ici_bidi_bytes_per_s * num_axes
    return passes * array_bytes / aggregate_bandwidth


def case2_strategy_times_ref(batch, d_model, d_ff, x_shards, flops_per_s, ici_bidi_bytes_per_s):
    bytes_per_value = 2  # bf16
    full_matmul_flops = 2.0 * batch * d_model * d_ff

    # Strategy 1: gather the whole weight matrix (d_model x d_ff values), then every chip does all the FLOPs.
    gather_s = (bytes_per_value * d_model * d_ff) / ici_bidi_bytes_per_s
    math1_s = full_matmul_flops / flops_per_s
    strategy1 = math1_s if math1_s > gather_s else gather_s

    # Strategy 2: every chip does 1/x of the FLOPs, then the [batch, d_ff] partial sums are AllReduced,
    # which costs two passes of that array over the ring.
    partial_bytes = bytes_per_value * batch * d_ff
    reduce_s = 2 * partial_bytes / ici_bidi_bytes_per_s
    math2_s = full_matmul_flops / x_shards / flops_per_s
    strategy2 = math2_s if math2_s > reduce_s else reduce_s

    return [strategy1, strategy2]
