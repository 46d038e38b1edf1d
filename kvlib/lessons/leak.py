"""Why prompt caches are kept per tenant: with one cache shared by everyone, the time to first
token tells an attacker which prompts someone else has already sent.

The attack is the audit of Gu et al., "Auditing Prompt Caching in Language Model APIs"
(ICML 2025): time prompts that would hit a cache against prompts that cannot, and test
whether the two samples of times differ. Their audits found caches shared across users
at seven API providers, OpenAI among them; several changed this after the authors told them.
They used a Kolmogorov-Smirnov test; here the Mann-Whitney U test asks a close question:
does one sample tend to be larger than the other?
"""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
from scipy.stats import mannwhitneyu

from ..model.measure import one_thread, random_ids
from ..server.prompt_cache import PromptCache
from . import memory


class Medians(NamedTuple):  # the attacker's median time to first token, ms
    sent: float     # for prompts the victim had sent
    unsent: float   # for prompts nobody had sent


@dataclass
class Attack:
    shared: bool        # one cache for every tenant (True) or one per tenant (False)
    sent: list          # the attacker's time to first token (ms) for prompts the victim had sent
    unsent: list        # ... for prompts nobody had sent
    pvalue: float       # Mann-Whitney U, two-sided: how surprising the difference is if there were none
    prompt_tokens: int
    hits: tuple         # (of the sent, of the unsent): how many of the attacker's requests the cache served

    @property
    def medians(self):  # ms
        return Medians(float(np.median(self.sent)), float(np.median(self.unsent)))


def attacks(model, n=100, prompt_tokens=128, block_size=16, seed=0, warmup=4):
    """Both caches attacked in one run: a victim sends every other one of n secret prompts to a cache shared by all
    tenants and to a cache kept per tenant; the attacker then sends all n to each and times them. -> (shared, per
    tenant), two Attacks.

    Timed as the lessons time (speed.py): on one CPU thread, after `warmup` untimed prefills of other prompts on each
    cache, the two caches taking turns prompt by prompt (which goes first alternating) and the secrets interleaved
    (victim's, nobody's, victim's...), so a machine slowing down or speeding up during the run touches the four
    samples alike."""
    caches = [PromptCache(model, block_size=block_size, share_across_tenants=shared) for shared in (True, False)]
    secrets = [random_ids(model, prompt_tokens, seed * 100_003 + i) for i in range(n)]
    probes = [[], []]  # per cache, the attacker's Prefill of every secret, in order
    with one_thread():
        for pc in caches:
            for s in secrets[::2]:
                pc.prefill(s, tenant="victim")
            for i in range(warmup):  # nobody's prompts, untimed: the first prefills pay for memory the others reuse
                pc.prefill(random_ids(model, prompt_tokens, 10**9 + i), tenant="warm-up")
        for i, s in enumerate(secrets):
            turn = (0, 1) if i // 2 % 2 == 0 else (1, 0)  # each cache first for half the sent and half the unsent
            for c in turn:
                probes[c].append(caches[c].prefill(s, tenant="attacker"))
    return tuple(_attack(pc.share_across_tenants, p, prompt_tokens) for pc, p in zip(caches, probes))


def _attack(shared, probes, prompt_tokens):  # the attacker's Prefills, in the secrets' order -> Attack
    times = [p.seconds * 1e3 for p in probes]
    hit = [p.receipt.cached_tokens > 0 for p in probes]  # what the timing can only hint at, read off the receipt
    sent, unsent = times[::2], times[1::2]
    return Attack(shared, sent, unsent, float(mannwhitneyu(sent, unsent).pvalue), prompt_tokens,
                  (sum(hit[::2]), sum(hit[1::2])))


def sized_for(model, gmacs=1.0):
    """(secrets, prompt tokens) that keep both attacks to seconds on a laptop CPU: the longest prompt
    (448, 256, 128 or 64 tokens, within the context) whose cold prefill costs at most `gmacs` billion
    multiply-adds, with 40 secrets; a model too big even for 64 tokens (GPT-2 small, SmolLM2) gets 24 secrets
    of 64 tokens. Longer prompts make hits and misses further apart, so the test needs fewer of them; two
    groups of 12 times that do not overlap at all already give a p-value under one in a million."""
    for tokens in (448, 256, 128, 64):
        if tokens < model.config.n_ctx and sum(memory.forward_macs_by_part(model.config, 0, tokens).values()) <= gmacs * 1e9:
            return 40, tokens
    return 24, 64
