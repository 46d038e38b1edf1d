"""Pictures: data in, matplotlib Figure out. Never takes a model.

Figures are built with `matplotlib.figure.Figure` (not pyplot), so a notebook shows
exactly the figure returned and nothing piles up in memory. Inputs are checked
with a hint, as in jessevig/bertviz.
"""

import contextlib
import numbers
from pathlib import Path

import matplotlib
import numpy as np
from matplotlib import font_manager
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

from .. import i18n

# Chinese labels (kvlib.set_language("zh"), or a learner's own text) need a CJK font after matplotlib's own, which
# has none: the first of these the machine has (Debian's fonts-noto-cjk, macOS's, Windows'), glyph by glyph.
# Only installed ones are named, as matplotlib warns of each missing family it is given.
CJK_FONTS = ("Noto Sans CJK SC", "Source Han Sans SC", "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei",
             "SimHei", "WenQuanYi Zen Hei")


def _installed():  # -> the font families matplotlib can draw with
    """matplotlib lists the machine's fonts once and caches the list: a CJK font installed later (make test's
    fonts-noto-cjk after a first plot) is missing from it, and Chinese labels draw as boxes. Then the fonts the
    machine has that the list lacks are added (matplotlib's own bitmap-only ones, an emoji font, it refuses), and
    the list saved where matplotlib keeps it, as matplotlib saves its own: the next import reads it, not the disk."""
    manager = font_manager.fontManager
    if not {f.name for f in manager.ttflist} & set(CJK_FONTS):
        known = {f.fname for f in manager.ttflist}
        added = set(font_manager.findSystemFonts()) - known
        for path in added:
            with contextlib.suppress(NotImplementedError, OSError, RuntimeError, ValueError):
                manager.addfont(path)
        if added:  # json_dump only warns where the cache cannot be written
            font_manager.json_dump(manager, Path(matplotlib.get_cachedir(), f"fontlist-v{manager.__version__}.json"))
    return {f.name for f in manager.ttflist}


matplotlib.rcParams["font.family"] = ["sans-serif", *[f for f in CJK_FONTS if f in _installed()][:1]]


def _show_figures_inline():
    """Let a notebook show a returned Figure as a picture without importing pyplot."""
    try:
        from IPython import get_ipython
        from IPython.core.pylabtools import select_figure_formats
    except ImportError:
        return
    if get_ipython() is not None:
        select_figure_formats(get_ipython(), {"png"}, bbox_inches="tight")


_show_figures_inline()

FAMILY_COLOURS = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2"]
MARKERS = ["o", "s", "^", "D", "v", "P", "X"]  # a second cue beside colour
PROMPT, GENERATED, NEW = "#cfe2f3", "#fce5cd", "#f6b26b"


def _check_labels(n, labels, what):
    if labels is not None and len(labels) != n:
        raise ValueError(f"{len(labels)} {what} labels for {n} {what}s: pass one label per {what}")


def loop_diagram(n_layer):
    """text -> tokens -> embeddings -> n_layer x (attention, feed-forward) -> next token, fed back."""
    if not isinstance(n_layer, numbers.Integral) or isinstance(n_layer, bool) or n_layer < 1:
        raise ValueError(f"loop_diagram takes the model's number of layers, a whole number of at least 1, "
                         f"not {n_layer!r}")
    fig = Figure(figsize=(10, 2.8))
    ax = fig.add_axes([0, 0, 1, 1])
    ax.set_xlim(0, 10), ax.set_ylim(0, 3), ax.axis("off")
    boxes = [(i18n.t("plot.loop.text"), "#eeeeee"), (i18n.t("plot.loop.tokens"), PROMPT), (i18n.t("plot.loop.embeddings"), PROMPT),
             (i18n.t("plot.loop.layers", n=n_layer), "#d9ead3"), (i18n.t("plot.loop.probs"), GENERATED),
             (i18n.t("plot.loop.pick"), NEW)]
    for i, (label, colour) in enumerate(boxes):
        x = 0.2 + i * 1.65
        ax.add_patch(FancyBboxPatch((x, 1.4), 1.3, 1.1, boxstyle="round,pad=0.05", fc=colour, ec="#555555"))
        ax.text(x + 0.65, 1.95, label, ha="center", va="center", fontsize=10)
        if i:
            ax.add_patch(FancyArrowPatch((x - 0.33, 1.95), (x - 0.02, 1.95), arrowstyle="-|>", mutation_scale=14))
    ax.add_patch(FancyArrowPatch((9.2, 1.35), (2.3, 1.35), connectionstyle="arc3,rad=-0.25", arrowstyle="-|>",
                                 mutation_scale=16, color="#cc4125", lw=1.8))
    ax.text(5.6, 0.25, i18n.t("plot.loop.back"), ha="center", color="#cc4125", fontsize=10)
    return fig


def input_growth(prompt_tokens, new_tokens):
    """Row t: what step t feeds the model without a cache: the prompt and every token so far."""
    if isinstance(prompt_tokens, str) or isinstance(new_tokens, str) or not new_tokens:
        raise ValueError("input_growth takes lists of token strings, the prompt's and at least one new token, "
                         f"not {prompt_tokens!r:.40} and {new_tokens!r:.40}")
    steps = len(new_tokens)
    width = len(prompt_tokens) + steps
    fig = Figure(figsize=(min(16, 1.2 + 0.75 * width), 0.9 + 0.38 * steps))
    ax = fig.add_subplot()
    for s in range(steps):
        row = list(prompt_tokens) + list(new_tokens[:s])
        for j, tok in enumerate(row):
            colour = PROMPT if j < len(prompt_tokens) else GENERATED
            ax.add_patch(FancyBboxPatch((j + 0.05, -s - 0.4), 0.9, 0.8, boxstyle="round,pad=0.02", fc=colour, ec="white"))
            ax.text(j + 0.5, -s, repr(tok)[1:-1][:7], ha="center", va="center", fontsize=7)
        ax.add_patch(FancyBboxPatch((len(row) + 0.05, -s - 0.4), 0.9, 0.8, boxstyle="round,pad=0.02", fc=NEW, ec="k"))
        ax.text(len(row) + 0.5, -s, repr(new_tokens[s])[1:-1][:7], ha="center", va="center", fontsize=7,
                weight="bold")
    ax.set_xlim(0, width + 0.2), ax.set_ylim(-steps + 0.4, 0.6)
    ax.set_yticks([-s for s in range(steps)],
                  [i18n.t("plot.step", step=s + 1, n=len(prompt_tokens) + s) for s in range(steps)])
    ax.set_xticks([]), ax.spines[:].set_visible(False)
    ax.set_title(i18n.t("plot.growth.title"), fontsize=10, loc="left")
    fig.tight_layout()
    return fig


def heatmap(matrix, title, xlabel="", ylabel="", row_labels=None, col_labels=None, annotate=None,
            cmap="RdBu_r", ax=None, colorbar=True):
    """A matrix as colours, with its numbers written in when it is small enough to read them."""
    m = np.asarray(matrix, dtype=float)
    if m.ndim != 2:
        raise ValueError(f"heatmap takes a 2-D matrix, got shape {m.shape}: pick one layer and head first")
    _check_labels(m.shape[0], row_labels, "row")
    _check_labels(m.shape[1], col_labels, "column")
    fig = ax.figure if ax is not None else Figure(figsize=(min(14, 2 + 0.55 * m.shape[1]), min(9, 1.5 + 0.45 * m.shape[0])))
    ax = ax or fig.add_subplot()
    finite = m[np.isfinite(m)]
    lim = float(np.abs(finite).max()) if finite.size else 1.0
    centred = cmap == "RdBu_r"
    im = ax.imshow(np.where(np.isfinite(m), m, np.nan), cmap=cmap, aspect="auto",
                   vmin=-lim if centred else None, vmax=lim if centred else None)
    if annotate is None:
        annotate = m.size <= 160
    if annotate:
        for (i, j), v in np.ndenumerate(m):
            ax.text(j, i, "-inf" if np.isneginf(v) else f"{v:.2f}", ha="center", va="center", fontsize=7,
                    color="#999999" if not np.isfinite(v) else "black")
    if row_labels is not None:
        ax.set_yticks(range(m.shape[0]), row_labels, fontsize=8)
    if col_labels is not None:
        ax.set_xticks(range(m.shape[1]), col_labels, fontsize=8, rotation=60, ha="right")
    ax.set_title(title, fontsize=10), ax.set_xlabel(xlabel), ax.set_ylabel(ylabel)
    if colorbar:
        fig.colorbar(im, ax=ax, fraction=0.04)
    if ax is fig.axes[0]:
        fig.tight_layout()
    return fig


def projection(coords, words, labels, title):
    """Words as points in 2 dimensions, a colour and a marker shape per family (colour is never the only
    cue). A static figure: the map to hover and turn in 3D is views.EmbeddingMap."""
    coords = np.asarray(coords, dtype=float)
    if coords.ndim != 2 or coords.shape[1] != 2:
        raise ValueError(f"projection draws 2 dimensions, got shape {coords.shape}: project first "
                         "(embeddings.pca(x, 2))")
    _check_labels(len(coords), words, "point")
    fig = Figure(figsize=(9, 6.5))
    ax = fig.add_subplot()
    for k, family in enumerate(dict.fromkeys(labels)):
        idx = [i for i, f in enumerate(labels) if f == family]
        colour = FAMILY_COLOURS[k % len(FAMILY_COLOURS)]
        ax.scatter(*coords[idx].T, color=colour, marker=MARKERS[k % len(MARKERS)], label=family, s=40, alpha=0.8)
        for i in idx:
            ax.annotate(words[i], coords[i], xytext=(3, 3), textcoords="offset points", fontsize=8, color=colour)
    ax.set_xlabel(i18n.t("plot.projection.x")), ax.set_ylabel(i18n.t("plot.projection.y"))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1))  # beside the plot, never over a word
    ax.set_title(title, fontsize=10)
    fig.tight_layout()
    return fig


def similarity_by_distance(sims, title):
    """Mean cosine similarity of two position rows against how far apart they are: sims [n_ctx - 1]
    for distances 1, 2, ...; a table of noise stays at 0, a smooth pattern falls with distance."""
    sims = np.asarray(sims, dtype=float)
    fig = Figure(figsize=(8, 3.2))
    ax = fig.add_subplot()
    ax.plot(np.arange(1, len(sims) + 1), sims, color="#3d85c6", lw=2)
    ax.axhline(0, color="#999999", ls="--", label=i18n.t("plot.distance.zero"))
    ax.set_xlabel(i18n.t("plot.distance.x")), ax.set_ylabel(i18n.t("plot.distance.y"))
    ax.set_title(title, fontsize=10), ax.grid(alpha=0.3), ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def resend_hits(runs, title):
    """Share of immediate resends that hit against the number of replicas, one line per router
    (routing.RoutingRun records); the dashed line is 1/replicas, a random pick's chance of the right machine."""
    runs = list(runs)
    if not runs:
        raise ValueError("resend_hits needs at least one run: pass what routing.simulate returned")
    fig = Figure(figsize=(7, 3.4))
    ax = fig.add_subplot()
    routers = list(dict.fromkeys(r.router for r in runs))
    for k, name in enumerate(routers):
        mine = sorted((r.replicas, r.repeat_hit_rate) for r in runs if r.router == name)
        ax.plot(*zip(*mine), marker=MARKERS[k], color=FAMILY_COLOURS[k],
                label=i18n.t("plot.resend.router", name=i18n.named("router", name)))
    ns = sorted({r.replicas for r in runs})
    ax.plot(ns, [1 / n for n in ns], "--", color="#999999", label=i18n.t("plot.resend.chance"))
    ax.set_xticks(ns), ax.set_xlabel(i18n.t("plot.resend.xlabel"))
    ax.set_ylim(0, 1.05), ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_ylabel(i18n.t("plot.resend.ylabel")), ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def step_costs(lengths, cached, uncached, ylabel, title):
    """Cost per decode step, with and without the cache, against the sequence length."""
    fig = Figure(figsize=(8, 3.6))
    ax = fig.add_subplot()
    ax.plot(lengths, uncached, label=i18n.t("plot.steps.without"), color="#cc4125")
    ax.plot(lengths, cached, label=i18n.t("plot.steps.with"), color="#3d85c6")
    ax.set_xlabel(i18n.t("plot.steps.xlabel")), ax.set_ylabel(ylabel), ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def feed_variants(runs, steps=4):
    """What each variant of the loop fed the model at its first steps, and the token it picked.

    runs: objects with .feed (a name), .fed_tokens (each step's input as text), .from_prompt (how
    many of those are the prompt's) and .tokens (each step's pick), as loop.feed_loop returns."""
    runs = list(runs)
    if not runs:
        raise ValueError("feed_variants needs at least one run: pass what loop.feed_loop returned")
    steps = min(steps, min(len(r.tokens) for r in runs))
    width = max(len(fed) for r in runs for fed in r.fed_tokens[:steps]) + 1
    fig = Figure(figsize=(min(16, 2.4 + 0.8 * width), 0.9 + len(runs) * (0.45 + 0.36 * steps)))
    for k, (ax, run) in enumerate(zip(fig.subplots(len(runs), 1, squeeze=False)[:, 0], runs)):
        for s in range(steps):
            fed, n_prompt = run.fed_tokens[s], run.from_prompt[s]
            cells = [(tok, PROMPT if j < n_prompt else GENERATED, "normal") for j, tok in enumerate(fed)]
            for j, (tok, colour, weight) in enumerate(cells + [(run.tokens[s], NEW, "bold")]):
                ax.add_patch(FancyBboxPatch((j + 0.05, -s - 0.4), 0.9, 0.8, boxstyle="round,pad=0.02", fc=colour,
                                            ec="k" if weight == "bold" else "white"))
                ax.text(j + 0.5, -s, repr(tok)[1:-1][:9], ha="center", va="center", fontsize=7, weight=weight)
        ax.set_xlim(0, width + 0.2), ax.set_ylim(-steps + 0.4, 0.6)
        ax.set_yticks([-s for s in range(steps)], [i18n.t("plot.step", step=s + 1, n=len(run.fed_tokens[s]))
                                                   for s in range(steps)], fontsize=8)
        ax.set_xticks([]), ax.spines[:].set_visible(False)
        ax.set_title(i18n.t(f"plot.feeds.{run.feed}"), fontsize=10, loc="left", weight="bold")
    fig.suptitle(i18n.t("plot.feeds.title"), fontsize=10, x=0.02, ha="left")
    fig.tight_layout()
    return fig


def _table(values, rows, cols, name, row, col):  # -> [rows, cols] array, or a hint
    v = np.asarray(values, dtype=float)
    if v.shape != (rows, cols):
        raise ValueError(f"{name} has shape {v.shape}: pass one row per {row} ({rows}) and one column per {col} ({cols})")
    return v


def _grouped_bars(ax, series, values):  # one bar per series side by side in each group; values [series, groups]
    width = 0.8 / len(series)
    return [ax.bar(np.arange(values.shape[1]) + (k - (len(series) - 1) / 2) * width, row, width, label=label,
                   color=FAMILY_COLOURS[k % len(FAMILY_COLOURS)]) for k, (label, row) in enumerate(zip(series, values))]


def temperature_bars(tokens, temperatures, probs):
    """The top tokens' probabilities at each temperature: probs [len(temperatures), len(tokens)]."""
    p = _table(probs, len(temperatures), len(tokens), "probs", "temperature", "token")
    fig = Figure(figsize=(8, 3.4))
    ax = fig.add_subplot()
    for bars, row in zip(_grouped_bars(ax, [f"T = {T:g}" for T in temperatures], p), p):
        ax.bar_label(bars, [f"{v:.2f}" for v in row], fontsize=7)
    ax.set_xticks(range(len(tokens)), [repr(tok) for tok in tokens], fontsize=9)
    ax.set_ylabel(i18n.t("plot.temperature.ylabel")), ax.set_ylim(0, min(1.08, p.max() * 1.15 + 0.02))
    ax.set_title(i18n.t("plot.temperature.title", n=len(temperatures)), fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def token_ratios(labels, names, ratios, baseline="English"):
    """Tokens for the same text in each language, as a multiple of the baseline's: ratios [len(names), len(labels)]."""
    r = _table(ratios, len(names), len(labels), "ratios", "tokenizer", "text")
    fig = Figure(figsize=(9, 3.6))
    ax = fig.add_subplot()
    _grouped_bars(ax, names, r)
    ax.axhline(1, color="#555555", ls="--", lw=1)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_ylabel(i18n.t("plot.ratios.ylabel", baseline=baseline))
    ax.set_title(i18n.t("plot.ratios.title", baseline=baseline), fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def separation_curves(curves, chance, title):
    """Family separation against the number of PCA dimensions kept: {model name: [score in 1D, 2D, ...]}."""
    if not curves or not all(len(scores) for scores in curves.values()):
        raise ValueError("separation_curves takes {model name: [score in 1D, 2D, ...]}, at least one score each; "
                         f"got {curves!r:.60}")
    fig = Figure(figsize=(8, 3.6))
    ax = fig.add_subplot()
    for k, (name, scores) in enumerate(curves.items()):
        dims = range(1, len(scores) + 1)
        ax.plot(dims, scores, marker="o", label=name, color=FAMILY_COLOURS[k % len(FAMILY_COLOURS)])
    ax.axhline(chance, color="#999999", ls="--", label=i18n.t("plot.separation.chance", chance=f"{chance:.0%}"))
    ax.set_xlabel(i18n.t("plot.separation.x")), ax.set_ylabel(i18n.t("plot.separation.y"))
    ax.set_ylim(0, 1.05), ax.yaxis.set_major_formatter(lambda v, _: f"{v:.0%}")
    ax.set_title(title, fontsize=10), ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1))
    fig.tight_layout()
    return fig


def widths(dims_by_name, title):
    """How many numbers each model gives a token: {model name: n_embd}, as bars with their values."""
    if not dims_by_name or not all(isinstance(d, numbers.Integral) for d in dims_by_name.values()):
        raise ValueError(f"widths takes {{model name: n_embd}}, whole numbers, at least one; got {dims_by_name!r:.60}")
    names, dims = list(dims_by_name), list(dims_by_name.values())
    fig = Figure(figsize=(8, 0.8 + 0.45 * len(names)))
    ax = fig.add_subplot()
    ax.barh(names, dims, color=FAMILY_COLOURS[0])
    for i, d in enumerate(dims):
        ax.text(d, i, f" {d:,}", va="center", fontsize=8)
    ax.invert_yaxis(), ax.set_xlim(0, max(dims) * 1.12)
    ax.set_xlabel(i18n.t("plot.widths.x")), ax.set_title(title, fontsize=10)
    ax.spines[["right", "top"]].set_visible(False)
    fig.tight_layout()
    return fig


def time_to_first_token(lengths, cold_ms, warm_ms, title, warm_label=None):
    """Time to first token against prompt length, with nothing cached (cold) and with the prefix cached (warm)."""
    if not len(lengths) == len(cold_ms) == len(warm_ms):
        raise ValueError(f"{len(lengths)} lengths, {len(cold_ms)} cold and {len(warm_ms)} warm times: "
                         "pass one time of each per length")
    fig = Figure(figsize=(7, 3.4))
    ax = fig.add_subplot()
    ax.plot(lengths, cold_ms, "o-", color="#cc4125", label=i18n.t("plot.ttft.cold"))
    ax.plot(lengths, warm_ms, "o-", color="#3d85c6", label=warm_label or i18n.t("plot.ttft.warm"))
    ax.set_xlabel(i18n.t("plot.ttft.xlabel")), ax.set_ylabel("ms"), ax.set_title(title, fontsize=10)
    ax.set_ylim(bottom=0), ax.legend(fontsize=8), ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def timing_leak(panels, bins=30):
    """One histogram per attack: the attacker's times for prompts a victim sent and for prompts nobody sent.

    panels: [(title, sent_ms, unsent_ms, p-value)]."""
    fig = Figure(figsize=(4.6 * len(panels), 3.2))
    for k, (title, sent, unsent, p) in enumerate(panels):
        ax = fig.add_subplot(1, len(panels), k + 1)
        edges = np.histogram_bin_edges(np.concatenate([sent, unsent]), bins=bins)  # the same bins for both
        ax.hist(sent, bins=edges, alpha=0.7, color="#cc4125", label=i18n.t("plot.leak.sent"))
        ax.hist(unsent, bins=edges, alpha=0.7, color="#3d85c6", label=i18n.t("plot.leak.unsent"))
        ax.set_title(i18n.t("plot.leak.title", title=title, p=p), fontsize=10)
        ax.set_xlabel(i18n.t("plot.leak.xlabel")), ax.set_ylabel(i18n.t("plot.leak.ylabel")), ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def macs_by_part(cached, uncached, title, unit=1e6):
    """One decode step's multiply-adds by part ({part: count}), with and without the cache, on a log axis."""
    if list(cached) != list(uncached):
        raise ValueError(f"cached and uncached must name the same parts in the same order; got {list(cached)} "
                         f"and {list(uncached)}")
    parts = list(cached)[::-1]  # the first part on top
    y = np.arange(len(parts))
    fig = Figure(figsize=(9, 0.55 * len(parts) + 1.2))
    ax = fig.add_subplot()
    for offset, counts, label, colour in ((0.2, uncached, i18n.t("plot.macs.without"), "#cc4125"),
                                          (-0.2, cached, i18n.t("plot.macs.with"), "#3d85c6")):
        values = [counts[p] / unit for p in parts]
        bars = ax.barh(y + offset, values, height=0.38, color=colour, label=label)
        ax.bar_label(bars, [f"{v:,.1f}" if v < 100 else f"{v:,.0f}" for v in values], padding=3, fontsize=8)
    ax.set_xscale("log")
    ax.set_xlim(right=ax.get_xlim()[1] * 8)  # room for the labels of the longest bars
    ax.set_yticks(y, [i18n.t("macs." + p) if "macs." + p in i18n.TEXT else p for p in parts])  # memory's parts, in words
    ax.set_xlabel(i18n.t("plot.macs.xlabel"))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    return fig


def step_seconds_by_context(lengths, ms, title):
    """Measured milliseconds (of a cached decode step, or of its attention alone) against the tokens
    already in the cache, with a straight trend line through them."""
    fig = Figure(figsize=(8, 3.4))
    ax = fig.add_subplot()
    ax.plot(lengths, ms, "o", color="#3d85c6", label=i18n.t("plot.context.measured"))
    x = np.asarray(lengths, dtype=float)
    from scipy.stats import theilslopes  # here, not at import: scipy.stats takes seconds to load

    # the median of the slopes between pairs of points (Theil-Sen): one point slowed by a busy moment
    # of the machine cannot tilt it, as it would a least-squares fit
    slope, intercept, _, _ = theilslopes(ms, x, method="joint")  # joint: the intercept is median(y - slope x)
    ax.plot(x, intercept + slope * x, "--", color="#999999",
            label=i18n.t("plot.context.trend", intercept=f"{intercept:.2f}", slope=f"{slope * 1e3:.2f}"))
    ax.set_ylim(bottom=0)
    ax.set_xlabel(i18n.t("plot.context.xlabel")), ax.set_ylabel(i18n.t("plot.context.ylabel"))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def attention_share(lengths, shares_by_model, title, trained=None):
    """The fraction of a cached decode step's multiply-adds spent in attention, against the context
    (log axis), one line per model ({name: [share per length]}); the 50 % line marks where it dominates.
    trained ({name: tokens}): a dotted line at each model's trained context, labelled with its name; the
    model's line goes on dashed past it, where it counts work on a text the model cannot read."""
    fig = Figure(figsize=(8, 3.6))
    ax = fig.add_subplot()
    trained = trained or {}
    for k, ((name, shares), colour) in enumerate(zip(shares_by_model.items(), FAMILY_COLOURS)):
        if len(shares) != len(lengths):
            raise ValueError(f"{name}: {len(shares)} shares for {len(lengths)} lengths: pass one per length")
        x, y = np.asarray(lengths), np.asarray(shares) * 100
        end = trained.get(name, np.inf)
        ax.plot(x[x <= end], y[x <= end], color=colour, label=name)
        if name in trained:
            ax.plot(x[x >= end], y[x >= end], color=colour, ls="--")
            ax.axvline(end, color=colour, ls=":", lw=1.2)
            # left of its line, near the top, where the shares are still low: one row per model, on white
            ax.text(end, 92 - 10 * k, i18n.t("plot.share.trained", name=name) + " ", fontsize=8, color=colour,
                    ha="right", va="center", bbox=dict(facecolor="white", edgecolor="none", alpha=0.85, pad=1))
    ax.axhline(50, color="#999999", ls="--", lw=1)
    ax.text(lengths[0], 52, i18n.t("plot.share.half"), fontsize=8, color="#666666")
    ax.set_xscale("log")
    ax.set_ylim(0, 100)
    ax.set_xlabel(i18n.t("plot.share.xlabel")), ax.set_ylabel(i18n.t("plot.share.ylabel"))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def savings_vs_loss(names, saved, kl, title):
    """Each way of shrinking the cache as a point: the fraction of its bytes saved (x) against the KL of the
    next-token distribution from the uncompressed model's (y, log scale: nats, 0 drawn at the bottom)."""
    if not len(names) == len(saved) == len(kl):
        raise ValueError(f"{len(names)} names, {len(saved)} savings and {len(kl)} KLs: pass one of each per method")
    floor = 1e-5  # a KL of 0 (nothing changed) has no place on a log axis: draw it at the floor
    fig = Figure(figsize=(9, 4.2))
    ax = fig.add_subplot()
    for k, (name, x, y) in enumerate(zip(names, saved, kl)):
        colour = FAMILY_COLOURS[k % len(FAMILY_COLOURS)]
        ax.scatter(x * 100, max(y, floor), color=colour, s=40, zorder=3)
        left = k % 2  # every other label on the left of its point, so neighbours' labels do not collide
        ax.annotate(name, (x * 100, max(y, floor)), textcoords="offset points", xytext=(-6 if left else 6, 4),
                    ha="right" if left else "left", fontsize=7, color=colour)
    ax.set_yscale("log")
    ax.set_xlim(0, 100)
    ax.set_xlabel(i18n.t("plot.savings.xlabel")), ax.set_ylabel(i18n.t("plot.savings.ylabel"))
    ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def loss_by_position(curves, title, smooth=16):
    """Next-token loss along a text, one line per variant ({label: [loss per position]}), each averaged
    over `smooth` neighbouring positions so the trend shows through the word-to-word noise."""
    fig = Figure(figsize=(8, 3.6))
    ax = fig.add_subplot()
    for (label, losses), colour in zip(curves.items(), FAMILY_COLOURS):
        if len(losses) < smooth:
            raise ValueError(f"{label}: {len(losses)} positions, fewer than smooth={smooth}: pass a longer text")
        moving = np.convolve(losses, np.ones(smooth) / smooth, mode="valid")
        ax.plot(np.arange(len(moving)) + smooth // 2, moving, color=colour, label=label)
    ax.set_xlabel(i18n.t("plot.loss.xlabel")), ax.set_ylabel(i18n.t("plot.loss.ylabel", n=smooth))
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def throughput_by_batch(batches, tokens_per_second, title):
    """Total tokens/s against batch size, one line per series ({label: [tokens/s per batch]}), on log axes,
    with the line "b times batch 1" dotted beside each: where a series follows it, b users cost what one did."""
    for label, tps in tokens_per_second.items():
        if len(tps) != len(batches):
            raise ValueError(f"{label!r}: {len(tps)} rates for {len(batches)} batch sizes: pass one rate per batch size")
    fig = Figure(figsize=(7, 3.8))
    ax = fig.add_subplot()
    b = np.asarray(batches, dtype=float)
    for i, (label, tps) in enumerate(tokens_per_second.items()):
        colour = FAMILY_COLOURS[i % len(FAMILY_COLOURS)]
        ax.plot(b, tps, marker=MARKERS[i % len(MARKERS)], color=colour, lw=2, label=label)
        ax.plot(b, tps[0] * b / b[0], ":", color=colour, lw=1.2)
        ax.annotate(f"{tps[-1] / tps[0]:.1f}x", (b[-1], tps[-1]), xytext=(6, 0), textcoords="offset points",
                    va="center", fontsize=10, color=colour)
    ax.plot([], [], ":", color="#555555", label=i18n.t("plot.batch.free"))
    ax.set_xscale("log", base=2), ax.set_yscale("log")
    ax.set_xlim(b[0] / 1.3, b[-1] * 1.8)  # room for the gains written after the last points
    ax.set_xticks(b, [str(int(x)) for x in b])
    ax.set_xlabel(i18n.t("plot.batch.xlabel"), fontsize=11)
    ax.set_ylabel(i18n.t("plot.batch.ylabel"), fontsize=11)
    ax.set_title(title, fontsize=11)
    ax.legend(fontsize=9, loc="upper left")
    ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    return fig


# --- the benchmark suite's figures (kvlib.tools.bench writes them), from its result dict ------------------

def _bench_axes(n):
    fig = Figure(figsize=(5 * n, 4), layout="constrained")
    return fig, fig.subplots(1, n, squeeze=False)[0]


def bench_decode(result):
    """Decode tokens/s per prompt length, the four runs side by side, one panel per model."""
    fig, axes = _bench_axes(len(result["models"]))
    for ax, (name, r) in zip(axes, result["models"].items()):
        x = np.arange(len(r["decode"]))
        for i, label in enumerate(r["decode"][0]["tokens_per_second"]):  # the four runs, hatched as well as coloured
            ax.bar(x + (i - 1.5) * 0.2, [d["tokens_per_second"][label] for d in r["decode"]], 0.2, label=label,
                   hatch=["", "//", "..", "xx"][i % 4])
        ax.set_xticks(x, [str(d["prompt_len"]) for d in r["decode"]])
        ax.set(yscale="log", xlabel="prompt tokens", ylabel="decode tokens/s", title=name)
    axes[0].legend(fontsize=8)
    return fig


def bench_time_to_first_token(result, labels):
    """Time to first token of a long prompt: no prompt cache, cold, warm (labels: key -> bar label)."""
    fig, axes = _bench_axes(len(result["models"]))
    for ax, (name, r) in zip(axes, result["models"].items()):
        t = r["time_to_first_token"]
        ax.bar(list(labels.values()), [t["seconds"][k] * 1e3 for k in labels], color=["grey", "C3", "C2"])
        ax.set(ylabel="ms", title=f"{name}, {t['prompt_len']}-token prompt")
        ax.tick_params(axis="x", labelsize=7)
    return fig


def bench_kv_bytes(result):
    """Bytes of kvlib's cache after each run against the formula's line."""
    fig, axes = _bench_axes(len(result["models"]))
    for ax, (name, r) in zip(axes, result["models"].items()):
        kv = r["kv_bytes"]
        tokens = np.array([0, max(kv["tokens"])])
        ax.plot(tokens, tokens * kv["formula_bytes_per_token"] / 1e6, "--", color="grey",
                label=f"formula: {kv['formula_bytes_per_token']:,} bytes/token")
        ax.plot(kv["tokens"], np.array(kv["measured"]) / 1e6, "o", label="measured cache")
        ax.set(xlabel="tokens in the cache", ylabel="MB", title=name)
        ax.legend(fontsize=8)
    return fig


def bench_floor(result):
    """Milliseconds per cached decode step against the bandwidth floor and the bare matmuls."""
    fig, axes = _bench_axes(len(result["models"]))
    for ax, (name, r) in zip(axes, result["models"].items()):
        d = r["decode"][0]
        bars = {"bandwidth floor": r["floor_seconds"], "bare matmuls": r["bare_matmul_seconds"],
                "kvlib, cached": 1 / d["tokens_per_second"]["kvlib, cached"],
                "transformers, cached": 1 / d["tokens_per_second"]["transformers, cached"]}
        ax.bar(list(bars), [s * 1e3 for s in bars.values()], color=["grey", "C7", "C0", "C1"])
        for i, s in enumerate(bars.values()):
            ax.annotate(f"{r['floor_seconds'] / s:.0%}", (i, s * 1e3), ha="center", va="bottom", fontsize=8)
        ax.set(ylabel="ms per token (% = share of the floor)", title=f"{name}, {d['prompt_len']}-token prompt")
        ax.tick_params(axis="x", labelsize=7)
    return fig
