"""Reference solutions for the chapter 6 code items ("Training LLaMA 3 on TPUs").

Each function is self-contained (plain Python, no imports) and written in a different style from the
task docstrings: quantities are built up step by step (FLOPs per token, seconds, bytes per component)
instead of as a single closed form.
"""

SECONDS_PER_DAY = 24 * 60 * 60


def ref_training_time_days(n_params, n_tokens, num_chips, flops_per_s_per_chip, mfu):
    """Wall-clock days to train on n_tokens with 6 FLOPs per parameter per token at the given MFU."""
    flops_each_token = 6.0 * n_params
    total = flops_each_token * n_tokens
    achieved_cluster_rate = num_chips * flops_per_s_per_chip * mfu
    return total / achieved_cluster_rate / SECONDS_PER_DAY


def ref_min_chips_for_training_memory(n_params, batch_tokens, d_model, n_layers, checkpoints_per_layer,
                                      hbm_bytes_per_chip):
    """Fewest chips whose combined HBM holds bf16 params, fp32 Adam moments and bf16 [B, D] checkpoints."""
    weights = n_params * 2                       # bf16
    adam_moments = n_params * (4 + 4)            # fp32 first and second moments
    one_checkpoint = batch_tokens * d_model * 2  # a bf16 [B, D] activation
    checkpoints = one_checkpoint * checkpoints_per_layer * n_layers
    needed = weights + adam_moments + checkpoints
    whole_chips = -(-needed // hbm_bytes_per_chip)  # ceiling division
    return int(whole_chips)
