"""The serving timeline: which request holds which batch slot at every step, static batching above
continuous batching, from live runs (serving.side_by_side or serving.serve).

Rows are the slots, columns the steps. A cell carries its request's letter; a prefill cell is also
hatched and bold with a ▸ (a ↺ when it read cached blocks: prefix caching), and a chunk of a longer prefill
(serve's step_tokens) its token count; a decode cell plain; a preempted request's cell, at the step it gave its
blocks back, dashed with a ✕; an idle slot dotted with a grey · (colour is never the only cue). Hover a cell for
its request's prompt and answer lengths, the prompt tokens it reused, a chunk's share of its prefill, what a
preemption cost (steps without it, tokens fed again), time to first token and latency; its cells light up in
every run shown. Under the slots, the blocks in use after each step, and above them those the index keeps that
no request holds. Without runs, or with data it cannot draw, the view says so in place."""

import reprlib

import traitlets as T

from ...errors import KVLibError
from ...i18n import TEXT, local, t
from ...server.serving import ServingRun
from .base import View, module

MARK = {"prefill": "▸", "decode": "", "reused": "↺", "preempted": "✕"}  # reused: a prefill that read cached blocks


def ms(seconds):
    return round(seconds * 1e3, 2)


class ServingTimeline(View):
    _esm = module("timeline.js")
    WORDS = "timeline"
    title = T.Unicode("").tag(sync=True)
    requests = T.List().tag(sync=True)  # per request of the stream: {label, prompt, answer} (tokens)
    runs = T.List().tag(sync=True)      # per run: {name, policy, max_batch, n_blocks, block_size, tokens, ms,
                                        #   tokens_per_second, mean_latency_ms, mean_ttft_ms, idle, blocks_allocated,
                                        #   blocks_freed, blocks_cached, step_tokens, tokens_fed, preemptions,
                                        #   cells: [step][slot] null or [request, "prefill" | "decode" | "preempted",
                                        #   tokens fed], step_ms: [step], blocks: [step] (in use), cached: [step],
                                        #   served: [{slot, reused, preempted, ttft_ms, latency_ms}]}

    @classmethod
    def of(cls, runs, title=None):
        """runs: ServingRuns of one stream (a list, or side_by_side's {policy: run}, caching_side_by_side's
        {"prefix caching": run, "no prefix caching": run}, or one run), drawn in that order, a dict's keys
        naming them. title: by default, the view's own in kvlib's language."""
        names = [str(k) for k in runs] if isinstance(runs, dict) else None
        runs = [runs] if isinstance(runs, ServingRun) else list(runs.values()) if isinstance(runs, dict) else runs
        if not (isinstance(runs, (list, tuple)) and all(isinstance(r, ServingRun) and r.served and r.steps for r in runs)):
            raise KVLibError("ServingTimeline.of takes runs that served requests: what serving.side_by_side returns, "
                             f"or a list of serving.serve's runs; got {reprlib.repr(runs)}")
        stream = [(s.request.label, len(s.request.prompt_ids), s.request.max_new_tokens) for s in runs[0].served] \
            if runs else []
        for run in runs:
            if [(s.request.label, len(s.request.prompt_ids), s.request.max_new_tokens) for s in run.served] != stream:
                raise KVLibError("the runs served different requests: show runs of one stream side by side")
        title = t("timeline.title") if title is None else title
        return cls(title=title, requests=[dict(label=l, prompt=p, answer=a) for l, p, a in stream],
                   runs=[cls.data(run, k) for run, k in zip(runs, names or [None] * len(runs))]).check_size()

    @staticmethod
    def data(run, key=None):  # one ServingRun as plain data; key: its name in the caller's dict
        name = t(f"timeline.{run.policy}")  # a key kvlib names ("prefix caching") in kvlib's language; others as given
        if key not in (None, run.policy):
            name = t("timeline.named", policy=name, name=local(TEXT.get(f"timeline.{key}", key)))
        return dict(
            name=name, policy=run.policy, max_batch=run.max_batch, n_blocks=run.n_blocks, block_size=run.block_size,
            tokens=run.tokens, ms=ms(run.seconds), tokens_per_second=round(run.tokens_per_second, 1),
            mean_latency_ms=ms(run.mean_latency), mean_ttft_ms=ms(run.mean_ttft), idle=round(run.idle, 4),
            blocks_allocated=run.blocks_allocated, blocks_freed=run.blocks_freed, blocks_cached=run.blocks_cached,
            step_tokens=run.step_tokens, tokens_fed=run.tokens_fed, preemptions=sum(s.preempted for s in run.served),
            cells=[[list(c) if c else None for c in step.cells] for step in run.steps],
            step_ms=[ms(step.seconds) for step in run.steps], blocks=[step.blocks for step in run.steps],
            cached=[step.cached for step in run.steps],
            served=[dict(slot=s.slot, reused=s.reused, preempted=s.preempted, ttft_ms=ms(s.ttft), latency_ms=ms(s.latency))
                    for s in run.served])

    def summary(self):
        if not self.runs:
            return t("timeline.text_empty")
        try:
            return self._text()
        except (KeyError, TypeError, IndexError) as err:  # runs set by hand: said in place, as the page says it
            return t("timeline.broken", error=repr(err))

    def _text(self):
        lines = [self.title, t("timeline.text_cells")]
        for j, run in enumerate(self.runs):
            lines.append("\n" + t("timeline.text_run", j=j + 1, name=run["name"], tokens=f"{run['tokens']:,}",
                                    ms=f"{run['ms']:,.1f}", rate=f"{run['tokens_per_second']:,.1f}",
                                    latency=f"{run['mean_latency_ms']:,.1f}", ttft=f"{run['mean_ttft_ms']:,.1f}",
                                    idle=f"{run['idle']:.0%}", allocated=f"{run['blocks_allocated']:,}",
                                    freed=f"{run['blocks_freed']:,}", cached=f"{run['blocks_cached']:,}"))
            if run["preemptions"] or run["step_tokens"]:
                lines.append(t("timeline.fed", preemptions=t("timeline.preemption" if run["preemptions"] == 1 else
                                                             "timeline.preemptions", n=run["preemptions"]),
                               fed=f"{run['tokens_fed']:,}"))
            for slot in range(run["max_batch"]):
                row = [step[slot] for step in run["cells"]]
                lines.append(t("timeline.slot_head", slot=slot) + ": " + " ".join(
                    self.requests[c[0]]["label"] + self._mark(run, row, k) if c else "." for k, c in enumerate(row)))
        # no table of every request's times: the run's means above and the cell's own lines carry the lesson
        return "\n".join(lines)

    @staticmethod
    def _mark(run, row, k):  # ▸ a prefill, ↺ one that read cached blocks, then a chunk's tokens; ✕ preempted
        request, kind, fed = row[k]
        if kind != "prefill":
            return MARK[kind]
        chunk = any(0 <= j < len(row) and row[j] and row[j][:2] == row[k][:2] for j in (k - 1, k + 1))
        return MARK["reused" if run["served"][request]["reused"] else kind] + (str(fed) if chunk else "")
