"""What the KV cache costs and saves, by formula (checked against real tensors in tests).

Memory: every token keeps, in every layer, one key and one value vector per KV head:
    bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per number.
Compute, counted in multiply-adds (one multiply and one add; FLOPs are twice this):
a forward pass of T new tokens after P cached ones does the weight matmuls for the
T tokens only, and attention of each new token over everything before it.
"""


def kv_bytes_per_token(n_layer, n_kv_heads, head_dim, bytes_per_number=4):
    return 2 * n_layer * n_kv_heads * head_dim * bytes_per_number


def model_kv_bytes_per_token(config, bytes_per_number=4):
    return kv_bytes_per_token(config.n_layer, config.n_head, config.head_dim, bytes_per_number)


def forward_macs(config, past_len, new_tokens, logits_for=1):
    """Multiply-adds of one forward pass: new_tokens after past_len cached tokens."""
    C, L = config.n_embd, config.n_layer
    weights = 12 * L * C * C * new_tokens  # Q, K, V (3C²), output (C²), feed-forward (8C²) per token and layer
    # each new token at position p scores p+1 keys and mixes p+1 values, over all heads (C numbers)
    positions = range(past_len, past_len + new_tokens)
    attention = 2 * L * C * sum(p + 1 for p in positions)
    return weights + attention + logits_for * C * config.vocab_size


def decode_step_macs(config, seq_len, cached):
    """The step that produces token seq_len+1: one new token with a cache, all seq_len without."""
    return forward_macs(config, seq_len - 1, 1) if cached else forward_macs(config, 0, seq_len)
