"""Providers' published prompt-caching prices, as multiples of the base input price, one
table per cache mode, so no provider's rules are ever applied to the other's mode.

- automatic (OpenAI): every prompt of at least 1,024 tokens is cached by itself; hits
  come in steps of 128 tokens (1,024, 1,152, 1,280...); writing costs nothing extra;
  cached input is discounted. Sources: OpenAI, "Prompt Caching in the API" (openai.com,
  1 October 2024: 50 % off cached input for GPT-4o) and the "Prompt caching" guide
  (platform.openai.com); GPT-5's API prices (August 2025: $1.25 input, $0.125 cached
  input per million tokens, so 90 % off). Retention: see OPENAI_RETENTION.
- explicit (Anthropic): the request marks where the cacheable prefix ends (a
  `cache_control` breakpoint); writing it costs 1.25x base input for the 5-minute cache
  or 2x for the 1-hour one, reading it 0.1x. Source: Anthropic's docs, "Prompt caching"
  (docs.anthropic.com, pricing table, 2025). Marked prefixes shorter than the model's
  minimum are not cached: see ANTHROPIC_MIN_TOKENS (1,024 to 4,096 tokens by model).

A request's cost, in units of "one uncached input token", follows from its receipt.
"""

from dataclasses import dataclass

from ..i18n import named, t
from ..model.models import KVLibError
from ..texttable import text_table


@dataclass(frozen=True)
class Pricing:
    provider: str
    mode: str            # the cache mode these prices belong to: "automatic" or "explicit"
    read: float          # a cached input token, relative to an uncached one
    write: float         # a token written to the cache (1.0: billed as plain input)
    min_tokens: int      # prompts (automatic) or marked prefixes (explicit) shorter than this are never cached
                         # (Anthropic's differs by model: the lowest, 1,024, is used here; see ANTHROPIC_MIN_TOKENS)
    step: int            # cached prefixes come in multiples of this many tokens
    ttl_seconds: int     # how long an unused entry is kept (the shortest the provider states)
    retention: str
    source: str

    @property
    def name(self):  # "OpenAI, GPT-5", in Chinese "OpenAI GPT-5"; a provider of the learner's own as they named it
        return named("provider", self.provider)


# Anthropic's minimum cacheable prompt length, by model (tokens). Source: Anthropic's docs, "Prompt
# caching", section "Cache limitations" (platform.claude.com/docs/en/build-with-claude/prompt-caching),
# as quoted in anthropics/anthropic-sdk-python issue #1194 (github.com, 21 February 2026); the same
# figures in docs.orq.ai/docs/proxy/prompt-caching (read 1 December 2026). Left out: Claude Sonnet 4.6,
# 1,024 in the docs quoted in February 2026 but 2,048 in orq.ai's table and in LiteLLM's tests on
# Bedrock (BerriAI/litellm-docs pull request #49, 29 April 2026): the sources disagree.
ANTHROPIC_MIN_TOKENS = {
    "Claude Opus 4.5": 4096, "Claude Opus 4.6": 4096, "Claude Haiku 4.5": 4096,
    "Claude Sonnet 4.5": 1024, "Claude Opus 4.1": 1024, "Claude Opus 4": 1024, "Claude Sonnet 4": 1024,
    "Claude Haiku 3.5": 2048, "Claude Haiku 3": 2048,
}
ANTHROPIC_MIN_SOURCE = ("Anthropic's docs, 'Prompt caching', 'Cache limitations', as quoted in "
                        "anthropic-sdk-python issue #1194 (21 Feb 2026)")

# OpenAI's retention policies (`prompt_cache_retention`). Source: OpenAI's "Prompt caching" guide,
# section "Prompt cache retention" (developers.openai.com/api/docs/guides/prompt-caching, read
# 1 December 2026); the "24h" option reached OpenAI's SDKs in November 2025 (openai/openai-agents-python
# pull request #2095, 18 November 2025). The guide lists GPT-4.1 and GPT-5 models for extended retention,
# not GPT-4o.
OPENAI_IDLE_MINUTES = (5, 10)  # the default retention: cleared after 5-10 minutes unused (below)
OPENAI_RETENTION = {
    "in_memory": "the default: cleared after 5-10 minutes unused, always within 1 hour of its last use",
    "24h": "opt-in: kept up to 24 hours; K and V move to the GPU machine's local storage when GPU memory is full",
}


AUTOMATIC = {
    "openai-gpt-4o": Pricing("OpenAI, GPT-4o", "automatic", 0.50, 1.0, 1024, 128, 300,
                             "cleared after 5-10 minutes unused, always within 1 hour",
                             "openai.com, 'Prompt Caching in the API' (1 Oct 2024): cached input 50 % off"),
    "openai-gpt-5": Pricing("OpenAI, GPT-5", "automatic", 0.10, 1.0, 1024, 128, 300,
                            "cleared after 5-10 minutes unused, always within 1 hour; up to 24 hours "
                            "with prompt_cache_retention='24h'",
                            "platform.openai.com, 'Prompt caching' guide; GPT-5 API prices (Aug 2025): "
                            "$0.125 cached vs $1.25 input per 1M tokens"),
}
EXPLICIT = {
    "anthropic-5m": Pricing("Anthropic, 5-minute cache", "explicit", 0.10, 1.25, 1024, 1, 300,
                            "5 minutes, renewed by each hit",
                            "docs.anthropic.com, 'Prompt caching', pricing table (2025): 5-minute writes 1.25x, "
                            "reads 0.1x"),
    "anthropic-1h": Pricing("Anthropic, 1-hour cache", "explicit", 0.10, 2.00, 1024, 1, 3600,
                            "1 hour, renewed by each hit",
                            "docs.anthropic.com, 'Prompt caching', pricing table (2025): 1-hour writes 2x, "
                            "reads 0.1x"),
}
PRICING = {**AUTOMATIC, **EXPLICIT}


def check_mode(mode, prices):
    """Raise unless these prices belong to a cache of this mode (no provider's rules on the other's mode)."""
    if mode != prices.mode:
        raise KVLibError(f"{prices.provider} prices its {prices.mode} cache, not a mode={mode!r} one: "
                         f"use prices from pricing.{mode.upper()}")


def billed(receipt, prices, apply_minimum=True):
    """(cached, written, plain) token counts the provider would bill for this receipt.

    apply_minimum=True applies the provider's own rules on top of the receipt (its minimum
    and, for automatic caching, its 128-token steps). apply_minimum=False prices a miniature
    cache (our small models' contexts are shorter than the 1,024-token minimum) at the
    provider's ratios, counting the tokens as the receipt does."""
    if receipt.mode is not None:
        check_mode(receipt.mode, prices)
    cached = receipt.cached_tokens
    written = receipt.written_tokens if prices.mode == "explicit" else 0  # automatic: writes billed as plain input
    if apply_minimum:
        if receipt.input_tokens < prices.min_tokens:
            return 0, 0, receipt.input_tokens
        cached = cached // prices.step * prices.step
        if cached < prices.min_tokens:
            cached = 0
    return cached, written, receipt.input_tokens - cached - written


def cost(receipt, prices, apply_minimum=True):
    """Cost in units of one uncached input token."""
    cached, written, plain = billed(receipt, prices, apply_minimum)
    return cached * prices.read + written * prices.write + plain


def minimum(prices):
    """The shortest prompt (automatic) or marked prefix (explicit) the provider caches, as words: Anthropic's
    differs by model (ANTHROPIC_MIN_TOKENS), so its range is given, not the lowest that prompt_cache() uses."""
    if prices.mode == "explicit":
        low, high = min(ANTHROPIC_MIN_TOKENS.values()), max(ANTHROPIC_MIN_TOKENS.values())
        return t("pricing.by_model", low=low, high=high)
    return f"{prices.min_tokens:,}"


def kept(prices):
    """How long an unused entry is kept, as the provider states it."""
    if prices.mode == "automatic":
        return t("pricing.min", n=t("pricing.range", low=OPENAI_IDLE_MINUTES[0], high=OPENAI_IDLE_MINUTES[1]))
    return (t("pricing.min", n=prices.ttl_seconds // 60) if prices.ttl_seconds < 3600
            else t("pricing.hours", n=prices.ttl_seconds // 3600))


def table(prices=None):
    """The price list as text: one line per provider and mode, then where each figure comes from (the sources
    as published, in English, with their dates, in every language)."""
    rows = list((prices or PRICING).values())
    table = text_table([t(f"pricing.{c}") for c in ("provider", "mode", "read", "write", "minimum", "hits", "kept")],
                       [[p.name, t(f"mode.{p.mode}"), f"{p.read:.2f}", f"{p.write:.2f}", minimum(p),
                         t("pricing.steps", n=p.step) if p.mode == "automatic" else t("pricing.marked"), kept(p)]
                        for p in rows], align="<<>>>>>")
    lines = [t("pricing.source", provider=p.name, source=p.source) for p in rows]
    if any(p.mode == "explicit" for p in rows):
        lines.append(t("pricing.min_source", source=ANTHROPIC_MIN_SOURCE))
    return "\n".join([table, "", t("pricing.per_token"), t("pricing.sources")] + lines)


def seat_prices(seats=75):
    """Notebook 6's long prompt: a made-up price list of the Globe Theatre's seats, one line per seat
    ("Seat 1: row B, 6 shillings."), long enough to take a system prompt past the providers' 1,024-token minimum."""
    return "\n".join(t("pricing.seat", seat=i, row=chr(65 + i % 20), price=5 + i % 7) for i in range(1, seats + 1))


def prompt_cache(model, prices, **kwargs):
    """A PromptCache that caches as this provider does: its mode, minimum, step and time-to-live."""
    from ..server.prompt_cache import PromptCache
    return PromptCache(model, block_size=prices.step, ttl_seconds=prices.ttl_seconds, mode=prices.mode,
                       min_tokens=prices.min_tokens, **kwargs)
