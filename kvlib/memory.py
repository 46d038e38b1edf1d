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


def decode_step_macs_by_part(config, seq_len, cached):
    """decode_step_macs split by part (Q projection, ..., logits): where a step's multiply-adds go."""
    return forward_macs_by_part(config, seq_len - 1, 1) if cached else forward_macs_by_part(config, 0, seq_len)


def macs_table(config, lengths):
    """A text table: millions of multiply-adds of one decode step by part, with and without the cache,
    at each sequence length in `lengths` (the step that produces the token after them)."""
    steps = {n: (decode_step_macs_by_part(config, n, True), decode_step_macs_by_part(config, n, False))
             for n in lengths}
    parts = list(next(iter(steps.values()))[0]) + ["whole step"]
    total = lambda macs: sum(macs.values())
    cell = lambda macs, part: (total(macs) if part == "whole step" else macs[part]) / 1e6
    width, col = max(map(len, parts)), 19
    heads = [f"{'':<{width}}" + "".join(f" | {f'{n} tokens':^{col}}" for n in lengths),
             f"{'millions of multiply-adds':<{width}}" + f" | {'cached':>8} {'uncached':>10}" * len(lengths)]
    rows = [f"{part:<{width}}" + "".join(f" | {cell(c, part):>8,.1f} {cell(u, part):>10,.0f}"
                                         for c, u in steps.values()) for part in parts]
    return "\n".join(heads + ["-" * len(heads[1])] + rows)
