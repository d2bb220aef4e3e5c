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


# --- ch04 ---
# Transformer accounting (ch4, "All the Transformer Math You Need to Know"). Arguments use the book's
# letters spelled out: d_model = D, d_ff = F, n_heads = N (query heads), n_kv_heads = K, d_head = H,
# vocab = V, n_layers = L, batch = B (sequences), q_len = T, kv_len = S. Counts are plain numbers of
# parameters / FLOPs / bytes; the unit is in each function's name.


def matmul_flops(n_rows: float, n_contract: float, n_cols: float) -> float:
    """FLOPs of one [n_rows, n_contract] x [n_contract, n_cols] matmul: 2*N*P*M (ch4, Counting Dots).

    A training step (forward + both backward matmuls) costs 3x this: 6*N*P*M (ch4, Forward and reverse FLOPs).
    """
    return 2 * n_rows * n_contract * n_cols


def mlp_params_per_layer(d_model: float, d_ff: float, mlp_matrices: int = 3) -> float:
    """Parameters of one MLP block: mlp_matrices * D * F (ch4, MLPs).

    mlp_matrices = 3 for a gated MLP (W_in1, W_in2, W_out), 2 for a plain up/down MLP (ch4, Transformer Accounting).
    """
    return mlp_matrices * d_model * d_ff


def attention_params_per_layer(d_model: float, n_heads: float, n_kv_heads: float, d_head: float) -> float:
    """Parameters of the Q, K, V, O projections of one layer: 2*D*(N+K)*H (ch4, Attention).

    MHA: n_kv_heads = n_heads (gives 4*D*N*H); MQA: n_kv_heads = 1; GQA: n_kv_heads divides n_heads.
    """
    return 2 * d_model * (n_heads + n_kv_heads) * d_head


def transformer_params_count(d_model: float, d_ff: float, n_layers: float, n_heads: float, n_kv_heads: float,
                             d_head: float, vocab: float = 0, *, mlp_matrices: int = 3, vocab_matrices: int = 2,
                             norm_params_per_layer: float = 0, n_experts: float = 1) -> float:
    """Parameter count (params) of a decoder-only Transformer (ch4, Global FLOPs and Params Calculation).

    L * (n_experts * mlp_matrices*D*F + 2*D*(N+K)*H + norm_params_per_layer) + vocab_matrices * D * V.
    - vocab_matrices: 2 = untied embedding + unembedding (ch4 Problem 1, ch6 LLaMA count), 1 = tied, 0 = ignore.
    - norm_params_per_layer: ch4 Problem 1 counts D per layer ("Other: D"); ch6's LLaMA count uses 0.
    - n_experts: MoE with E MLP blocks per layer (ch4, Sparsity and Mixture-of-Experts). For the params
      *activated* per token, pass the experts per token k as n_experts.
    """
    per_layer = (n_experts * mlp_params_per_layer(d_model, d_ff, mlp_matrices)
                 + attention_params_per_layer(d_model, n_heads, n_kv_heads, d_head) + norm_params_per_layer)
    return n_layers * per_layer + vocab_matrices * d_model * vocab


def forward_flops_2nd(n_params: float, n_tokens: float) -> float:
    """Forward-pass (inference) FLOPs of a dense model, ignoring dot-product attention: 2 * params * tokens
    (ch4, Forward and reverse FLOPs). For an MoE pass the activated parameter count."""
    return 2 * n_params * n_tokens


def train_flops_6nd(n_params: float, n_tokens: float) -> float:
    """Training FLOPs (forward + backward), ignoring dot-product attention: 6 * params * tokens
    (ch4, General rule of thumb for Transformer FLOPs). For an MoE pass the activated parameter count."""
    return 6 * n_params * n_tokens


def train_flops_block_remat_8nd(n_params: float, n_tokens: float) -> float:
    """Training FLOPs with block rematerialisation (only each layer's input saved; the forward pass is
    repeated in the backward pass): about 8 * params * tokens (ch4, Gradient checkpointing)."""
    return 8 * n_params * n_tokens


def mlp_flops_per_layer(n_tokens: float, d_model: float, d_ff: float, mlp_matrices: int = 3,
                        train: bool = True) -> float:
    """FLOPs of one MLP block over n_tokens (= B*T) tokens (ch4, MLPs).

    train=True: 6 * tokens * mlp_matrices * D * F (= 18BTDF for a gated MLP); train=False (forward only): 2 * ...
    """
    return (6 if train else 2) * n_tokens * mlp_matrices * d_model * d_ff


def qkvo_flops_per_layer(n_tokens: float, d_model: float, n_heads: float, n_kv_heads: float, d_head: float,
                         train: bool = True) -> float:
    """FLOPs of the Q, K, V, O projections of one layer over n_tokens tokens (ch4, Attention).

    train=True: 12 * tokens * D * (N+K) * H (= 24BTDNH for MHA); train=False (forward only): 4 * tokens * D * (N+K) * H.
    """
    return (6 if train else 2) * n_tokens * attention_params_per_layer(d_model, n_heads, n_kv_heads, d_head)


def attention_dot_flops_per_layer(batch: float, q_len: float, kv_len: float, n_heads: float, d_head: float,
                                  train: bool = True) -> float:
    """FLOPs of dot-product attention (Q.K^T and softmax.V) in one layer, softmax ignored (ch4, Attention).

    train=True: 12 * B * T * S * N * H; train=False (forward only): 4 * B * T * S * N * H.
    Self-attention has kv_len = q_len (12BT^2NH when training).
    """
    return (6 if train else 2) * 2 * batch * q_len * kv_len * n_heads * d_head


def attention_to_matmul_flops_ratio(seq_len: float, d_model: float, d_ff: float, n_heads: float,
                                    n_kv_heads: float, d_head: float, mlp_matrices: int = 3) -> float:
    """Dimensionless ratio of dot-product self-attention FLOPs to the layer's weight-matmul FLOPs (QKVO + MLP)
    (ch4, Fractional cost of attention with context length). Equals T / (8D) when F = 4D, D = NH, N = K."""
    attn = attention_dot_flops_per_layer(1, seq_len, seq_len, n_heads, d_head)
    matmuls = (mlp_flops_per_layer(seq_len, d_model, d_ff, mlp_matrices)
               + qkvo_flops_per_layer(seq_len, d_model, n_heads, n_kv_heads, d_head))
    return attn / matmuls


def attention_arithmetic_intensity_flops_per_byte(q_len: float, kv_len: float, group_size: float) -> float:
    """Arithmetic intensity (FLOPs/byte) of the dot-product attention core in bf16 (ch4, A Few Problems to Work, Q4).

    FLOPs 4*B*T*S*N*H; bytes = read Q and write the output (2 bytes * B*T*N*H each) + read K and V
    (2 bytes * B*S*K*H each). With G = N/K (group_size) this is T*S*G / (T*G + S): T*G/(G+1) for prefill
    (S = T), S*G/(G+S) -> G for generation (T = 1).
    """
    return q_len * kv_len * group_size / (q_len * group_size + kv_len)


def kv_cache_bytes(seq_len: float, n_layers: float, n_kv_heads: float, d_head: float, bytes_per_value: float,
                   batch: float = 1) -> float:
    """Bytes of the KV cache: 2 (keys and values) * B * S * L * K * H * bytes_per_value (ch4, Key-Value (KV) caching).

    bytes_per_value: 1 for int8, 2 for bf16. seq_len = 1, batch = 1 gives the bytes per token.
    """
    return 2 * batch * seq_len * n_layers * n_kv_heads * d_head * bytes_per_value


def activation_checkpoint_bytes(n_tokens: float, d_model: float, n_layers: float, saved_per_layer: float,
                                bytes_per_value: float = 2) -> float:
    """Bytes of activations saved for the backward pass: bytes_per_value * saved_per_layer * tokens * D * L
    (ch4, Gradient checkpointing). The book's rough saved_per_layer: ~20 (save everything), ~7 (big matmul
    outputs only), 1 (block remat: each layer's input). ch6 uses 4 per layer."""
    return bytes_per_value * saved_per_layer * n_tokens * d_model * n_layers


def moe_compute_bound_batch_tokens(critical_intensity_flops_per_byte: float, n_experts: float,
                                   experts_per_token: float, weight_bytes_per_param: float = 1) -> float:
    """Batch size in tokens above which an MoE MLP is compute-bound when every expert's weights are loaded
    (ch4, A Few Problems to Work, Q8): FLOPs 2*k*B*D*F vs bytes E*D*F*bytes_per_param per matrix, so
    B > critical_intensity * E * bytes_per_param / (2 * k)."""
    return critical_intensity_flops_per_byte * n_experts * weight_bytes_per_param / (2 * experts_per_token)


# --- ch05 ---
# Training parallelism (ch5, "How to Parallelize a Transformer for Training") and its application to
# LLaMA 3 (ch6). C = per-chip FLOPs/s, W = bidirectional bandwidth in bytes/s per mesh axis (ICI) or per
# chip (DCN), M_X / M_Y = number of mesh axes used by FSDP / tensor parallelism.


def data_parallel_critical_batch_tokens(flops_per_s: float, bytes_per_s: float, n_axes: float = 1) -> float:
    """Tokens per data-parallel shard above which pure DP or FSDP is compute-bound: C / (W * n_axes)
    (ch5, Data Parallelism and Fully-Sharded Data Parallelism (FSDP)). With the ICI bandwidth the shard is a
    chip (2550 on v5p for one axis, 850 for three); with the per-chip DCN bandwidth the shard is a whole
    ICI-connected slice, i.e. tokens per pod (ch5, Scaling Across Pods)."""
    return flops_per_s / (bytes_per_s * n_axes)


def fsdp_tp_critical_batch_per_chip(flops_per_s: float, ici_bytes_per_s: float, d_ff: float,
                                    mesh_axes_product: float = 2) -> float:
    """Tokens per chip above which optimally mixed FSDP + tensor parallelism is compute-bound:
    (C/W)^2 / (M_X * M_Y * F) (ch5, Combining FSDP and Tensor Parallelism); M_X * M_Y = 2 on a 3D mesh."""
    alpha = flops_per_s / ici_bytes_per_s
    return alpha ** 2 / (mesh_axes_product * d_ff)


def optimal_fsdp_ways(batch_tokens: float, d_ff: float, n_chips: float, fsdp_axes: float = 2,
                      tp_axes: float = 1) -> float:
    """Real-valued FSDP degree X that minimises forward-pass comms of mixed FSDP + TP on n_chips = X*Y:
    sqrt(B/F * M_X/M_Y * N) (ch5, Combining FSDP and Tensor Parallelism)."""
    return (batch_tokens / d_ff * fsdp_axes / tp_axes * n_chips) ** 0.5


def adam_train_state_bytes(n_params: float, param_bytes: float = 2, optimizer_bytes_per_param: float = 8) -> float:
    """Bytes of parameters plus Adam state: bf16 params (2) + fp32 first and second moments (4 + 4) = 10 bytes
    per parameter (ch5, Data Parallelism)."""
    return n_params * (param_bytes + optimizer_bytes_per_param)


def train_time_s(total_flops: float, n_chips: float, flops_per_s: float, mfu: float) -> float:
    """Seconds to perform total_flops on n_chips chips of flops_per_s each at model FLOPs utilisation mfu
    (ch6, Counting parameters and FLOPs)."""
    return total_flops / (n_chips * flops_per_s * mfu)


# --- ch03 ---
def allgather_time_s(array_bytes: float, ici_bidi_bytes_per_s: float, num_axes: int = 1) -> float:
    """Bandwidth-bound time in seconds of an AllGather (or ReduceScatter) of an array of array_bytes total
    bytes over num_axes mesh axes that are each a full ring, with ici_bidi_bytes_per_s the bidirectional
    ICI bandwidth of one link: V / (W_ici * num_axes). Does not depend on the axis sizes
    (ch3, What Have We Learned?)."""
    return array_bytes / (ici_bidi_bytes_per_s * num_axes)


def allreduce_time_s(array_bytes: float, ici_bidi_bytes_per_s: float, num_axes: int = 1) -> float:
    """Bandwidth-bound time in seconds of an AllReduce of an array of array_bytes bytes (the full shape of
    the unreduced array) over num_axes full rings: a ReduceScatter plus an AllGather, twice the AllGather
    time (ch3, Case 3: both multiplicands have sharded contracting dimensions)."""
    return 2 * allgather_time_s(array_bytes, ici_bidi_bytes_per_s, num_axes)


# --- ch07 ---
def decode_step_time_s(batch: float, kv_bytes_per_seq: float, param_count: float, bytes_per_param: float,
                       n_chips: float, hbm_bytes_per_s_per_chip: float, flops_per_s_per_chip: float) -> float:
    """Theoretical time in seconds of one generate (decode) step, everything fully sharded over n_chips
    (ch7, Theoretical estimates for LLM latency and throughput, "Theoretical Step Time (General)"):
    attention reads every KV cache and is always HBM-bandwidth-bound, B * kv_bytes / (N * W_hbm); the
    weight matmuls take max(2 * B * params / (N * C), param_bytes / (N * W_hbm)).
    kv_bytes_per_seq is one sequence's whole cache in bytes; flops_per_s_per_chip is at the matmul precision."""
    total_bw = n_chips * hbm_bytes_per_s_per_chip
    attention_s = batch * kv_bytes_per_seq / total_bw
    mlp_s = max(2 * batch * param_count / (n_chips * flops_per_s_per_chip),
                param_count * bytes_per_param / total_bw)
    return attention_s + mlp_s


def max_kv_caches_fitting(hbm_bytes_total: float, param_bytes: float, kv_bytes_per_seq: float) -> int:
    """Largest whole number of KV caches (the decode batch size) that fit in the HBM left after the
    weights, activations ignored (ch7, Worked Problems Q2; ch8, Thinking about throughput)."""
    return int((hbm_bytes_total - param_bytes) // kv_bytes_per_seq)


# --- ch12 ---
# GPU collectives and rooflines on a switched network (ch12, "How to Think About GPUs"). A "node" is an
# NVLink domain of gpus_per_node GPUs (8 on DGX H100/B200, 72 on GB200 NVL72); W_gpu = per-GPU NVLink egress
# (one direction), W_node = a node's egress into the scale-out (InfiniBand) network. Levels of the tree run
# overlapped, so a collective costs the max over levels of a ring at each level.


def gpu_allgather_time_s(array_bytes: float, num_gpus: int, gpus_per_node: int, gpu_egress_bytes_per_s: float,
                         node_egress_bytes_per_s: float) -> float:
    """Bandwidth-bound seconds of an AllGather (or ReduceScatter) of array_bytes total bytes over num_gpus GPUs
    filling num_gpus / gpus_per_node whole nodes (or part of one node): a ring in the node,
    bytes * (D-1) / (D * W_gpu), overlapped with a ring over the M nodes, bytes * (M-1) / (M * W_node)
    (ch12, Intra-node collectives; Cross-node collectives; Quiz 4 Question 5)."""
    in_node = min(num_gpus, gpus_per_node)
    nodes = max(1, num_gpus // gpus_per_node)
    t_node = array_bytes * (in_node - 1) / (in_node * gpu_egress_bytes_per_s)
    t_scale_out = array_bytes * (nodes - 1) / (nodes * node_egress_bytes_per_s)
    return max(t_node, t_scale_out)


def gpu_dp_critical_tokens_per_gpu(flops_per_s: float, gpu_egress_bytes_per_s: float,
                                   node_egress_bytes_per_s: float, gpus_per_node: int, num_nodes: int,
                                   n_experts: float = 1, experts_per_token: float = 1) -> float:
    """Per-GPU batch in tokens above which pure data parallelism / FSDP is compute-bound on a GPU cluster
    (ch12, Data Parallelism): T_math = 8*k*B*D*F / (N*C) against T_comms = 8*E*D*F * max over levels of
    (n-1)/(n*W) for the node ring (n = gpus_per_node, W_gpu) and the ring over num_nodes nodes (W_node).
    Gives C/W_node for many nodes (2475 on H100), times E/k for an MoE."""
    d = gpus_per_node
    m = num_nodes
    per_byte = max((d - 1) / (d * gpu_egress_bytes_per_s), (m - 1) / (m * node_egress_bytes_per_s))
    return (n_experts / experts_per_token) * flops_per_s * per_byte
