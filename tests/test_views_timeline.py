"""The serving timeline, built from live runs on tiny: what it sends for a stream of four requests (cells, slots,
blocks, and times once each step is set to 1 ms) is the schedule worked out by hand, and in a real browser
(Chromium, the view's module on a bare page: no JupyterLab needed) its cells, hovers and linked highlights say
what it sends; without runs, or with data it cannot draw, it says that in place."""

import copy
from decimal import ROUND_HALF_UP, Decimal

import pytest

from kvlib import KVLibError
from kvlib.model.measure import one_thread, random_ids
from kvlib.server import serving
from kvlib.ui.views import ServingTimeline
from kvlib.ui.views.base import MAX_STATE_BYTES


@pytest.fixture(scope="module")
def runs(tiny):
    with one_thread():  # see test_serving.single_thread
        return serving.side_by_side(tiny, serving.request_stream(tiny, 8, seed=1), max_batch=3, repeats=1)


@pytest.fixture(scope="module")
def four(tiny):
    """Requests A-D, prompts of 3 tokens, answers of 2, 3, 1 and 2 tokens, served on 2 slots by both policies."""
    requests = [serving.Request(label, [5 + k, 6 + k, 7 + k], n) for k, (label, n) in enumerate(zip("ABCD", (2, 3, 1, 2)))]
    return {policy: serving.serve(tiny, requests, policy, max_batch=2) for policy in ("static", "continuous")}


# Worked by hand. A step prefills the requests it admits into free slots (static batching: only into an empty
# batch), each making its first token, beside one decode token for every request that was running before it, all
# in one forward call; a request leaves its slot when it has made its last token. Each sequence (at most 3 + 3 - 1 tokens) holds one
# block of 16 until it leaves.
P, D = "prefill", "decode"  # a cell: [request, kind, tokens fed]: a prefill its 3-token prompt, a decode 1
CELLS = {
    "static": [[[0, P, 3], [1, P, 3]],   # A and B admitted into the empty batch
               [[0, D, 1], [1, D, 1]],   # A makes its 2nd and last token
               [None, [1, D, 1]],     # static: C waits for the whole batch; B makes its 3rd and last
               [[2, P, 3], [3, P, 3]],   # C is done by its prefill, D makes its 1st
               [None, [3, D, 1]]],
    "continuous": [[[0, P, 3], [1, P, 3]],
                   [[0, D, 1], [1, D, 1]],
                   [[2, P, 3], [1, D, 1]],  # C takes A's slot at once (and is done by its prefill); B ends
                   [[3, P, 3], None],
                   [[3, D, 1], None]],
}
SLOTS = {"static": [0, 1, 0, 1], "continuous": [0, 1, 0, 0]}
BLOCKS = [2, 1, 0, 1, 0]  # in use after each step, in both runs


def test_the_timeline_sends_what_each_run_did(four):
    view = ServingTimeline.of(four)
    assert view.requests == [{"label": "A", "prompt": 3, "answer": 2}, {"label": "B", "prompt": 3, "answer": 3},
                             {"label": "C", "prompt": 3, "answer": 1}, {"label": "D", "prompt": 3, "answer": 2}]
    assert [r["policy"] for r in view.runs] == ["static", "continuous"]
    for sent in view.runs:
        policy = sent["policy"]
        assert sent["cells"] == CELLS[policy] and [s["slot"] for s in sent["served"]] == SLOTS[policy]
        assert sent["blocks"] == BLOCKS and sent["blocks_allocated"] == sent["blocks_freed"] == 4
        assert (sent["max_batch"], sent["block_size"], sent["tokens"], sent["idle"]) == (2, 16, 2 + 3 + 1 + 2, 2 / 10)
    assert view.state_bytes() < MAX_STATE_BYTES and view.check_size() is view
    text = view.summary()
    assert "slot 0: A▸ A . C▸ .\nslot 1: B▸ B B D▸ D\n" in text  # static
    assert "slot 0: A▸ A C▸ D▸ D\nslot 1: B▸ B B . ." in text    # continuous


def test_the_timeline_sends_each_runs_times_in_ms(four):
    """Every step (one forward call) of both runs set to 1 ms: the times the view sends are then counts of steps."""
    timed = copy.deepcopy(four)
    for run in timed.values():
        for step in run.steps:
            step.seconds = 0.001
        run.time_requests()
    view = ServingTimeline.of(timed)
    sent = {r["policy"]: r for r in view.runs}
    for policy in CELLS:
        assert sent[policy]["step_ms"] == [1] * 5 and sent[policy]["ms"] == 5
        assert sent[policy]["tokens_per_second"] == round(8 / 0.005, 1) == 1600
    # each request's first token (its TTFT) and last (its latency) at the end of the step that made it
    assert [(s["ttft_ms"], s["latency_ms"]) for s in sent["static"]["served"]] == [(1, 2), (1, 3), (4, 4), (4, 5)]
    assert [(s["ttft_ms"], s["latency_ms"]) for s in sent["continuous"]["served"]] == [(1, 2), (1, 3), (3, 3), (4, 5)]
    assert (sent["static"]["mean_ttft_ms"], sent["static"]["mean_latency_ms"]) == ((1 + 1 + 4 + 4) / 4, (2 + 3 + 4 + 5) / 4)
    assert (sent["continuous"]["mean_ttft_ms"], sent["continuous"]["mean_latency_ms"]) == ((1 + 1 + 3 + 4) / 4,
                                                                                           (2 + 3 + 3 + 5) / 4)
    assert "static batching: 8 tokens in 5.0 ms = 1,600.0 tokens/s; mean latency 3.5 ms, mean time to first " \
           "token 2.5 ms; 20% of slot-steps idle" in view.summary()


@pytest.fixture(scope="module")
def shared(tiny):
    """Requests A-D, each a 32-token system prompt (2 full blocks of 16) and 3 tokens of its own, answering 2 tokens,
    served continuously on 2 slots with prefix caching and without."""
    system = random_ids(tiny, 32, seed=5)
    requests = [serving.Request(label, system + [40 + k, 41 + k, 42 + k], 2) for k, label in enumerate("ABCD")]
    return {name: serving.serve(tiny, requests, "continuous", max_batch=2, prefix_caching=on)
            for name, on in serving.CACHING.items()}


def test_the_timeline_shows_the_blocks_prefix_caching_reused(shared):
    """Worked by hand. Step 0: A's prefill computes its 35 tokens in 3 blocks and files the system prompt's 2 full
    ones in the index after the call; B, whose first block is one A is computing, waits for it. Step 1: A decodes
    its 2nd and last token and leaves (its 3rd block goes back); B joins, holds the 2 filed blocks and computes its
    own 3 tokens in a 3rd. Steps 2-4: C takes A's slot and D B's, each the same from the index; after D leaves the
    index keeps the 2 blocks, held by nobody (cached). Without prefix caching every request computes all 35 tokens
    in 3 blocks of its own, and B joins at once."""
    view = ServingTimeline.of(shared)
    on, off = view.runs
    assert (on["name"], off["name"]) == ("continuous batching, prefix caching", "continuous batching, no prefix caching")
    assert [s["reused"] for s in on["served"]] == [0, 32, 32, 32] and [s["reused"] for s in off["served"]] == [0] * 4
    assert (on["blocks"], on["cached"]) == ([3, 3, 3, 3, 0], [0, 0, 0, 0, 2])
    assert (off["blocks"], off["cached"]) == ([6, 0, 6, 0], [0] * 4)
    # at the end every block taken is freed or kept by the index: 3 + 1 + 1 + 1 = 4 freed + 2 cached
    assert (on["blocks_allocated"], on["blocks_freed"], on["blocks_cached"]) == (6, 4, 2)
    assert (off["blocks_allocated"], off["blocks_freed"], off["blocks_cached"]) == (12, 12, 0)
    text = view.summary()
    assert "slot 0: A▸ A C↺ C .\nslot 1: . B↺ B D↺ D\n" in text  # with the index
    assert text.endswith("slot 0: A▸ A C▸ C\nslot 1: B▸ B D▸ D")  # without: the last lines, no table of every
    # request's times after them (notebook 8's cells print the means and the users' own table)
    assert "blocks: 6 allocated, 4 freed, 2 kept by the index" in text


def test_an_empty_timeline_says_how_to_fill_it_and_mixed_streams_are_refused(tiny, four):
    empty = ServingTimeline.of([])
    assert empty.runs == [] and "side_by_side" in empty.summary()
    other = serving.serve(tiny, [serving.Request("A", [5, 6, 7], 3)], max_batch=2)  # A answers 3 tokens, not 2
    with pytest.raises(KVLibError, match="different requests"):
        ServingTimeline.of([four["static"], other])



@pytest.fixture(scope="module")
def costly(tiny):
    """Notebook 8's four requests (prompts of 5, 5, 5 and 96 tokens answering 24, 24, 2 and 4) on 3 slots, blocks of
    16, no index: in a pool for all (11 blocks), in one of 8 (preemption) and at most 16 tokens a step (chunks)."""
    requests = [serving.Request(label, random_ids(tiny, prompt, seed=k), answer)
                for k, (label, prompt, answer) in enumerate((("A", 5, 24), ("B", 5, 24), ("C", 5, 2), ("D", 96, 4)))]
    serve = lambda **how: serving.serve(tiny, requests, max_batch=3, prefix_caching=False, **how)
    return {"pool of 11 blocks": serve(), "pool of 8 blocks": serve(n_blocks=8), "16 tokens a step": serve(step_tokens=16)}


def test_the_timeline_sends_a_preemption_and_a_chunked_prefill(costly):
    """Worked by hand. Step 0 prefills A, B and C (a block each); C makes its 2nd and last token at step 1; at step 2
    D's 96 tokens take 6 blocks beside A's and B's decodes. In the pool of 8 that is every block: at step 3 D's next
    token finds none, and D, the newest, is preempted (its cell in slot 2, feeding nothing); its 97 tokens (prompt
    and first answer token) need 7 blocks, free only when A and B leave after step 23, so D is prefilled again at
    step 24, in slot 0, and decodes at steps 25 and 26: 3 steps and 96 tokens more than in the pool for all. With 16
    tokens a step, A's and B's decodes take 2 of them from step 2, so D's prompt goes in chunks of 14 over steps 2-7
    and its last 12 at step 8, where it makes its first token, 6 steps later than whole."""
    view = ServingTimeline.of(costly)
    roomy, tight, chunked = view.runs
    assert tight["name"] == "continuous batching, pool of 8 blocks"
    assert (roomy["preemptions"], tight["preemptions"], chunked["preemptions"]) == (0, 1, 0)
    assert [s["preempted"] for s in tight["served"]] == [0, 0, 0, 1] and (len(tight["cells"]), len(roomy["cells"])) == (27, 24)
    assert tight["cells"][3][2] == [3, "preempted", 0] and tight["cells"][24][0] == [3, "prefill", 97]
    assert tight["tokens_fed"] - roomy["tokens_fed"] == 96 and chunked["step_tokens"] == 16
    chunks = [c for step in chunked["cells"] for c in step if c and c[:2] == [3, "prefill"]]
    assert [c[2] for c in chunks] == [14] * 6 + [12] and costly["16 tokens a step"].served[3].first == 8
    text = view.summary()
    assert "slot 2: C▸ C D▸ D✕ " + ". " * 22 + ".\n" in text
    assert "slot 0: A▸ " + "A " * 23 + "D▸ D D\n" in text
    assert "slot 2: C▸ C " + "D▸14 " * 6 + "D▸12 D D D " in text
    assert "1 preemption · 257 tokens fed, recomputed ones included" in text

# --- in a real browser ---

def standalone(browser, view):
    """A bare page with the view rendered as anywidget would, from its module, its style and its state; -> (page,
    console errors). The view talks to no kernel, so a stub model holding the state is all it needs."""
    page = browser.new_page(viewport={"width": 1400, "height": 900})
    errors = []
    page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.set_content("<html><body><div id='view'></div></body></html>")
    state = {k: v for k, v in view.get_state().items() if k not in ("_esm", "_css")}
    page.evaluate("""async ([esm, css, state]) => {
        const style = document.createElement("style");
        style.textContent = css;
        document.head.append(style);
        const mod = await import(URL.createObjectURL(new Blob([esm], { type: "text/javascript" })));
        mod.default.render({ model: { get: (k) => state[k], on() {}, off() {} }, el: document.getElementById("view") });
    }""", [view._esm, view._css, state])
    return page, errors



def fixed(x, digits):  # x as JavaScript's toFixed prints it: the exact binary value rounded, a tie upward
    return str(Decimal(x).quantize(Decimal(1).scaleb(-digits), ROUND_HALF_UP))


@pytest.mark.slow
def test_the_timeline_in_a_browser(runs):
    from browser import chromium, shot, tip

    static, cont = runs["static"], runs["continuous"]
    stream = [s.request for s in static.served]
    view = ServingTimeline.of(runs)
    # the page prints what it was sent, itself rounded (ms to 0.01, tokens/s to 0.1): a figure computed here from
    # the unrounded run can round the other way (36.849 -> 36.8 here, 36.85 -> 36.9 on the page)
    sent = {r["policy"]: r for r in view.runs}
    assert [s["latency_ms"] for s in sent["continuous"]["served"]] == [round(s.latency * 1e3, 2) for s in cont.served]
    with chromium() as browser:
        page, errors = standalone(browser, view)
        shot(page, "timeline")
        for run in (static, cont):
            grid = page.locator(f".kv-sv-run[data-policy='{run.policy}']")
            for kind in ("prefill", "decode", "idle"):  # every slot of every step drawn, its kind told apart
                n = sum(1 for step in run.steps for c in step.cells if (c[1] if c else "idle") == kind)
                assert grid.locator(f"td.kv-sv-cell[data-kind='{kind}']").count() == n
            by_place = sorted(run.served, key=lambda x: (x.slot, x.first))  # the page's order: slot by slot, step by step
            assert grid.locator("td.kv-sv-cell[data-kind='prefill']").all_inner_texts() == \
                   [f"▸{x.request.label}" for x in by_place]
            assert float(grid.locator("td.kv-sv-cell").first.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")) >= 14

        i = next(i for i, r in enumerate(stream) if r.max_new_tokens >= 3)  # a request with decode steps
        s = cont.served[i]
        k = s.first + 2
        cell = page.locator(f".kv-sv-run[data-policy='continuous'] td[data-slot='{s.slot}'][data-step='{k}']")
        assert cell.inner_text() == stream[i].label
        assert tip(page, cell).splitlines() == [
            f"request {stream[i].label} · continuous batching · step {k} · slot {s.slot}",
            f"decode: token 3 of {stream[i].max_new_tokens}",
            f"prompt {len(stream[i].prompt_ids)} tokens · answer {stream[i].max_new_tokens} tokens",
            f"time to first token {fixed(sent['continuous']['served'][i]['ttft_ms'], 1)} ms · "
            f"latency {fixed(sent['continuous']['served'][i]['latency_ms'], 1)} ms (from its arrival, at 0)"]
        # the hovered request lights up wherever it is, in both runs: one cell per token of its answer in each
        assert page.locator("td.kv-sv-cell.kv-linked").count() == 2 * stream[i].max_new_tokens
        assert set(page.locator("td.kv-sv-cell.kv-linked").evaluate_all("cs => cs.map(c => c.dataset.request)")) == {str(i)}

        k, slot = next((k, j) for k, step in enumerate(static.steps) for j, c in enumerate(step.cells) if c is None)
        waiting = sum(1 for x in static.served if x.first > k)
        idle = page.locator(f".kv-sv-run[data-policy='static'] td[data-slot='{slot}'][data-step='{k}']")
        assert tip(page, idle).splitlines() == [
            f"static batching · step {k} · slot {slot}: idle", f"{waiting} request{'' if waiting == 1 else 's'} still waiting to start",
            "static batching: the slot waits until its batch's last request is done"]
        blocks = page.locator(f".kv-sv-run[data-policy='static'] td.kv-sv-blocks[data-step='{k}']")
        assert tip(page, blocks).startswith(f"static batching · after step {k}: {static.steps[k].blocks} of {static.n_blocks} "
                                            f"blocks in use")
        assert page.locator(".kv-legend .kv-key").count() == 3  # no reused, chunk or preempted key: no run shows one
        ratio = page.locator(".kv-sv-ratio").inner_text()
        rates = {p: r["tokens_per_second"] for p, r in sent.items()}
        assert rates == {r.policy: round(r.tokens_per_second, 1) for r in (static, cont)}
        assert f"tokens/s {fixed(rates['continuous'] / rates['static'], 2)}×" in ratio
        assert f"steps {len(cont.steps)} against {len(static.steps)}" in ratio
        assert not errors, errors

        page, errors = standalone(browser, ServingTimeline.of([]))
        assert "No runs to show yet" in page.locator(".kv-empty").inner_text()
        broken = ServingTimeline.of(runs)
        broken.runs = [{"policy": "static"}]  # no cells: the view says so where it would draw, and nothing throws
        page, errors = standalone(browser, broken)
        assert page.locator(".kv-error").inner_text().startswith("This view could not draw its data:")
        assert not errors, errors


@pytest.mark.slow
def test_reused_blocks_in_a_browser(shared):
    """The page marks a prefill that read cached blocks, says how many tokens it read, and draws the blocks the
    index keeps above those in use."""
    from browser import chromium, shot, tip

    with chromium() as browser:
        page, errors = standalone(browser, ServingTimeline.of(shared))
        on = page.locator(".kv-sv-run[data-name='continuous batching, prefix caching']")
        off = page.locator(".kv-sv-run[data-name='continuous batching, no prefix caching']")
        prefills = "td.kv-sv-cell[data-kind='prefill']"
        assert on.locator(prefills).all_inner_texts() == ["▸A", "↺C", "↺B", "↺D"]  # slot by slot
        assert on.locator(prefills).evaluate_all("cs => cs.map(c => +c.dataset.reused)") == [0, 32, 32, 32]
        assert off.locator(prefills).all_inner_texts() == ["▸A", "▸C", "▸B", "▸D"]
        b_run = next(x for x in shared["prefix caching"].served if x.request.label == "B")  # where the step put it
        b = on.locator(f"td[data-slot='{b_run.slot}'][data-step='{b_run.first}']")
        assert tip(page, b).splitlines()[:2] == [
            f"request B · continuous batching, prefix caching · step {b_run.first} · slot {b_run.slot}",
                                                 "prefill: 32 of its 35 prompt tokens read from cached blocks, 3 computed"]
        run = shared["prefix caching"]
        k, st = next((k, st) for k, st in enumerate(run.steps) if st.cached)  # the first step after which the index keeps some
        blocks = on.locator(f"td.kv-sv-blocks[data-step='{k}']")
        assert tip(page, blocks).splitlines()[:2] == [
            f"continuous batching, prefix caching · after step {k}: {st.blocks} of {run.n_blocks} blocks in use (16 tokens each)",
            f"{st.cached} block{'' if st.cached == 1 else 's'} kept by the index, held by no request (cached)"]
        heights = blocks.locator("span").evaluate_all("ss => ss.map(s => [s.className, parseFloat(s.style.height)])")
        assert [c for c, _ in heights[:2]] == ["kv-sv-cached", "kv-sv-inuse"]
        assert [round(h, 1) for _, h in heights[:2]] == [round(100 * st.cached / run.n_blocks, 1), round(100 * st.blocks / run.n_blocks, 1)]
        assert (f"{run.blocks_allocated} allocated, {run.blocks_freed} freed, {run.blocks_cached} kept by the index at the end"
                in on.locator(".kv-caption").inner_text())
        assert "↺A prefill that read cached blocks" in " ".join(page.locator(".kv-legend").inner_text().split())
        shot(page, "timeline-reused")
        assert not errors, errors


@pytest.mark.slow
def test_a_preemption_and_chunks_in_a_browser(costly):
    """The page marks the preempted request's cell with a ✕, says what it cost (steps without it, tokens fed again),
    writes each chunk's tokens under its letter and says its share of the prefill, and counts a request's tokens
    across its preemption; the legend gains the two keys."""
    from browser import chromium, shot, tip

    tight, chunked = costly["pool of 8 blocks"], costly["16 tokens a step"]
    with chromium() as browser:
        page, errors = standalone(browser, ServingTimeline.of(costly))
        small = page.locator(".kv-sv-run[data-name='continuous batching, pool of 8 blocks']")
        cut = page.locator(".kv-sv-run[data-name='continuous batching, 16 tokens a step']")
        out = small.locator("td[data-kind='preempted']")
        assert out.count() == 1 and out.inner_text() == "✕D" and (out.get_attribute("data-step"),
                                                                   out.get_attribute("data-slot")) == ("3", "2")
        assert out.evaluate("e => getComputedStyle(e).borderTopStyle") == "dashed"  # a shape cue, not colour alone
        assert tip(page, out).splitlines()[:5] == [
            "request D · continuous batching, pool of 8 blocks · step 3 · slot 2",
            "preempted: a running request's next tokens (its own or an older one's) found no free block, so this one, "
            "admitted last, gave its blocks back and waits in front",
            "its cost: 21 steps without it, then from step 24 97 tokens fed again",
            "prompt 96 tokens · answer 4 tokens", "1 preemption in this run"]
        again = small.locator("td[data-step='24'][data-slot='0']")
        assert again.inner_text() == "▸D" and tip(page, again).splitlines()[1] == (
            "prefill again after its preemption: its prompt and the answer it had made, 97 tokens fed again (past the "
            "blocks the index kept)")
        assert tip(page, small.locator("td[data-step='25'][data-slot='0']")).splitlines()[1] == "decode: token 3 of 4"
        assert sum(s.preempted for s in tight.served) == small.locator("td[data-kind='preempted']").count()

        d = cut.locator("td[data-request='3'][data-kind='prefill']")
        assert d.all_inner_texts() == ["▸D14"] * 6 + ["▸D12"]
        assert d.evaluate_all("cs => cs.map(c => +c.dataset.fed)") == [14] * 6 + [12]
        assert d.evaluate_all("cs => cs.map(c => +c.dataset.chunk)") == list(range(1, 8))
        assert sum(map(int, d.evaluate_all("cs => cs.map(c => c.dataset.fed)"))) == len(chunked.served[3].request.prompt_ids)
        assert tip(page, d.nth(1)).splitlines()[:3] == [
            "request D · continuous batching, 16 tokens a step · step 3 · slot 2",
            "prefill in 7 chunks of at most 16 tokens a step: chunk 2, 14 tokens; 28 of 96 fed", "prompt 96 tokens · answer 4 tokens"]
        assert tip(page, cut.locator("td[data-step='9'][data-request='3']")).splitlines()[1] == "decode: token 2 of 4"
        assert "1 preemption · 257 tokens fed" in small.locator(".kv-sv-figures").inner_text()
        keys = [" ".join(k.split()) for k in page.locator(".kv-legend .kv-key").all_inner_texts()]
        assert [k.split(" ")[0] for k in keys] == ["▸A", "▸An", "A", "✕A", "·"]  # chunk and preempted shown; no reuse
        assert keys[1].startswith("▸An prefill chunk (step_tokens)") and keys[3].startswith("✕A preempted:")
        shot(page, "timeline-costs")
        assert not errors, errors
