"""What the KV cache costs and saves, by formula (checked against real tensors in tests).

Memory: every token keeps, in every layer, one key and one value vector per KV head:
    bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per number.
Compute, counted in multiply-adds (one multiply and one add; FLOPs are twice this):
a forward pass of T new tokens after P cached ones does the weight matmuls for the
T tokens only, and attention of each new token over everything before it. Grouped
KV heads (Llama family) shrink both the cache and the K and V projections.
"""


def kv_bytes_per_token(n_layer, n_kv_heads, head_dim, bytes_per_number=4):
    return 2 * n_layer * n_kv_heads * head_dim * bytes_per_number


def model_kv_bytes_per_token(config, bytes_per_number=4):
    return kv_bytes_per_token(config.n_layer, config.n_kv_head, config.head_dim, bytes_per_number)


def forward_macs_by_part(config, past_len, new_tokens, logits_for=1):
    """Multiply-adds of one forward pass (new_tokens after past_len cached), by where they are spent."""
    C, L, I, hd, T = config.n_embd, config.n_layer, config.n_inner, config.head_dim, new_tokens
    q_width, kv_width = config.n_head * hd, config.n_kv_head * hd
    # each new token at position p scores p+1 keys and mixes p+1 values, in every query head
    seen = sum(range(past_len + 1, past_len + T + 1))
    return {
        "Q projection": L * T * C * q_width,
        "K and V projections": L * T * C * 2 * kv_width,
        "attention (scores and mixing)": L * 2 * q_width * seen,
        "output projection": L * T * q_width * C,
        "feed-forward": L * T * C * I * (3 if config.arch == "llama" else 2),  # SwiGLU has a third matrix
        "logits": logits_for * C * config.vocab_size,
    }


def forward_macs(config, past_len, new_tokens, logits_for=1):
    """Multiply-adds of one forward pass: new_tokens after past_len cached tokens."""
    return sum(forward_macs_by_part(config, past_len, new_tokens, logits_for).values())


def decode_step_macs(config, seq_len, cached):
    """The step that produces token seq_len+1: one new token with a cache, all seq_len without."""
    return forward_macs(config, seq_len - 1, 1) if cached else forward_macs(config, 0, seq_len)
