"""Reference solutions for the chapter 12 (GPU, held-out) code items.

Each function is self-contained (stdlib only) and deliberately written differently from the task
docstrings: per-level bandwidths are folded into "seconds per byte" costs and the slowest level wins.
"""


def allgather_seconds_switched(array_bytes, num_gpus, gpus_per_node, gpu_egress, node_egress):
    """AllGather on a two-level switched tree: NVLink ring in the node, scale-out ring across nodes."""
    levels = []
    local = num_gpus if num_gpus < gpus_per_node else gpus_per_node
    if local > 1:
        levels.append((1.0 - 1.0 / local) / gpu_egress)
    node_count = num_gpus // gpus_per_node
    if node_count > 1:
        levels.append((1.0 - 1.0 / node_count) / node_egress)
    if not levels:
        return 0.0
    return array_bytes * max(levels)


def critical_tokens_per_gpu_hierarchical(flops_per_s, gpu_egress, node_egress, gpus_per_node, num_nodes,
                                         num_experts, experts_per_token):
    """Tokens per GPU where 8*k*B*D*F/(N*C) == 8*E*D*F*seconds_per_byte; D and F cancel."""
    seconds_per_byte_node = (gpus_per_node - 1) / gpus_per_node / gpu_egress
    seconds_per_byte_out = 0.0
    if num_nodes > 1:
        seconds_per_byte_out = (num_nodes - 1) / num_nodes / node_egress
    sparsity = num_experts / experts_per_token
    return sparsity * flops_per_s * max(seconds_per_byte_node, seconds_per_byte_out)


def tp_degree_where_nvlink_catches_hbm(d_ff, batch_size, bytes_per_weight, hbm_bytes_per_s, nvlink_bytes_per_s):
    """Per-GPU seconds per unit of D: weight shard bytes_per_weight*F/Y over HBM vs 2*B over NVLink."""
    nvlink_seconds_per_d = 2.0 * batch_size / nvlink_bytes_per_s
    hbm_seconds_per_d_times_y = bytes_per_weight * d_ff / hbm_bytes_per_s
    return hbm_seconds_per_d_times_y / nvlink_seconds_per_d


def pipeline_transfer_seconds(batch_tokens, d_model, bandwidth, num_microbatches, num_stages):
    """Sequential hops, each moving one bf16 microbatch of activations between neighbouring stages."""
    bytes_per_hop = 2.0 * d_model * (batch_tokens / num_microbatches)
    hops = num_microbatches + num_stages - 2
    return hops * bytes_per_hop / bandwidth
