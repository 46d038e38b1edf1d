"""Providers' published prompt-caching prices, as multiples of the base input price.

One table, with where each figure was published and when, so it can be updated.
A request's cost, in units of "one uncached input token", follows from its receipt.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Pricing:
    provider: str
    read: float          # a cached input token, relative to an uncached one
    write: float         # a token written to the cache
    min_tokens: int      # prompts shorter than this are never cached
    step: int            # cached prefixes come in multiples of this many tokens
    retention: str
    source: str


PRICING = {
    "anthropic-5m": Pricing("Anthropic, 5-minute cache", 0.10, 1.25, 1024, 1, "5 minutes since last use",
                            "docs.anthropic.com, Prompt caching: pricing table (2025)"),
    "anthropic-1h": Pricing("Anthropic, 1-hour cache", 0.10, 2.00, 1024, 1, "1 hour since last use",
                            "docs.anthropic.com, Prompt caching: 1-hour cache duration (2025)"),
    "openai-gpt-5": Pricing("OpenAI, automatic (GPT-5)", 0.10, 1.00, 1024, 128, "5-10 minutes idle, up to 1 hour",
                            "platform.openai.com, Prompt caching guide and GPT-5 pricing (Aug 2025)"),
    "openai-gpt-4o": Pricing("OpenAI, automatic (GPT-4o)", 0.50, 1.00, 1024, 128, "5-10 minutes idle, up to 1 hour",
                             "openai.com, Prompt Caching in the API (Oct 2024)"),
}


def billed(receipt, pricing, apply_minimum=True):
    """(cached, written, plain) token counts a provider would bill for this receipt.

    apply_minimum=False prices short prompts as if they were long enough to cache
    (our models' contexts are shorter than providers' 1,024-token minimum)."""
    if apply_minimum and receipt.input_tokens < pricing.min_tokens:
        return 0, 0, receipt.input_tokens
    cached = receipt.cached_tokens // pricing.step * pricing.step
    written = receipt.written_tokens if pricing.write != 1.0 else 0  # automatic caching bills writes as input
    return cached, written, receipt.input_tokens - cached - written


def cost(receipt, pricing, apply_minimum=True):
    """Cost in units of one uncached input token."""
    cached, written, plain = billed(receipt, pricing, apply_minimum)
    return cached * pricing.read + written * pricing.write + plain
