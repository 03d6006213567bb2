"""LLAMA's policy switches (issue 21, item 3; heap/src/llama.h, LlamaPolicy): each on a
hand-built trace showing the case it fixes, with the invariant checker on after every
event, the huge-page counts asserted with and without it; the paper's policy unchanged by
default; every switch clean under the checker on a random trace."""

from __future__ import annotations

import json
import random
import subprocess

import pytest

import simulator

MS = 1_000_000
BLOCK = 8192
MIB = 1 << 20
INF = "constant:7"   # every object predicted never freed (a context that mostly dies)


pytestmark = pytest.mark.usefixtures("simulator_engine")


def llama(report: dict, label: str) -> dict:
    return next(a for a in report["allocators"] if a["name"] == f"llama:{label}")


def run(path, specs, **kw) -> dict:
    """One engine pass: one LLAMA per (label, predictor, policy), checked after every event."""
    preds = [f"{label}={pred}" for label, pred, _ in specs]
    pol = [f"{label}={p}" for label, _, p in specs]
    return simulator.simulate(path, preds, baseline=False, check_invariants=True, check_every=1,
                              policy=pol, **kw)


def test_occupancy_recycles_the_spans_of_an_inf_page(tmp_path):
    """(a) An inf page has no deadline, so the paper never recycles its partially free
    spans.  One thread fills a huge page with 4000 B objects predicted inf (4 per 16 KiB
    span, 128 spans); three of every four die; 380 of 4096 B arrive.  The paper opens a
    second huge page for them; with `occupancy` the 127 closed spans (a quarter of their
    lines used, <= 0.9) are listed and take three each in their 96 free lines."""
    recs = []
    for i in range(512):
        recs.append((i, 10 * MS + i if i % 4 else None, 4000, 1, 1, 16))
    for i in range(380):
        recs.append((20 * MS + i, None, 4096, 1, 1, 16))
    path = simulator.write_trace(tmp_path / "occ.lttrace", recs, end_ns=30 * MS)
    r = run(path, [("paper", INF, "paper"), ("occ", INF, "occupancy"), ("occ5", INF, "occupancy:0.5")], snapshots_ns=[15 * MS], snapshot_spans=True)
    paper, occ, occ5 = llama(r, "paper"), llama(r, "occ"), llama(r, "occ5")
    assert paper["final_huge_pages"] == 2 and paper["counters"]["recycled_span_reuses"] == 0
    assert occ["final_huge_pages"] == 1 and occ5["final_huge_pages"] == 1
    assert occ["counters"]["occupancy_span_reuses"] >= 127
    assert "occupancy_span_reuses" not in paper["counters"]
    assert r["settings"]["llama_policy"] == {"llama:paper": "paper", "llama:occ": "occupancy:0.9",
                                             "llama:occ5": "occupancy:0.5"}
    # The snapshot before the second wave: page 0 of `occ` has 127 closed spans listed for
    # recycling ('l'), 32 of 128 lines used; the paper's are closed ('c').
    snap = r["snapshots"][0]["huge_pages"]
    (p0,) = snap["llama:occ"]
    spans = p0["spans"].split()
    assert len(spans) == 128 and p0["lc"] == 7 and p0["deadline_ns"] is None
    assert sum(s.endswith(":32/128:l") for s in spans) == 127
    assert sum(s.endswith(":32/128:c") for s in snap["llama:paper"][0]["spans"].split()) == 127


@pytest.mark.parametrize("pred,policy,pages", [
    ("constant:4", "paper", 2),
    ("constant:4", "occupancy", 2),             # <100s has a deadline: its pages drain
    ("constant:4", "occupancy,own-blocks", 1),
    (INF, "paper", 2),
    (INF, "occupancy", 1),                      # inf has no deadline: own class at once
])
def test_own_class_blocks(tmp_path, pred, policy, pages):
    """(a) A page of 256 one-block objects of one class; 204 die; 150 more of the class.
    The paper lends an active page's free blocks to shorter classes only, so they open a
    second page; `occupancy` lends them to the page's own class when it has no deadline,
    `own-blocks` for every class (and restarts the page's deadline)."""
    recs = [(i, 10 * MS if i % 5 else None, BLOCK, 1, 1, 16) for i in range(256)]
    recs += [(20 * MS + i, None, BLOCK, 1, 1, 16) for i in range(150)]
    path = simulator.write_trace(tmp_path / "blocks.lttrace", recs, end_ns=30 * MS)
    r = run(path, [("x", pred, policy)], snapshots_ns=[30 * MS])
    a = llama(r, "x")
    assert a["final_huge_pages"] == pages
    if pages == 1:
        assert a["counters"]["occupancy_blocks"] == 150
        (p0,) = r["snapshots"][0]["huge_pages"]["llama:x"]
        assert p0["blocks"].count("R") == 52 + 150  # survivors (i % 5 == 0) + the new ones
        if pred == "constant:4":  # deadline restarted at the last reuse: + 2 x 100 s
            assert p0["deadline_ns"] == 20 * MS + 149 + 200_000 * MS


def test_span_fit_tries_other_listed_spans(tmp_path):
    """(c) Immix's overflow rule: an object that fits nowhere in the thread's recycled span
    goes to a fresh span.  Two spans with holes of 3968 and 3840 B come first in the list,
    125 with a hole of 8064 B after them; 20 objects of 4000 B arrive.  `occupancy` alone
    opens fresh spans on a second huge page; with `span-fit` the third listed span takes
    the object and replaces the recycled span."""
    recs = []
    for i in range(512):
        span, k = divmod(i, 4)
        if span < 2:
            free = 10 * MS + i if k in (0, 2) else None       # holes of 31 and 30 lines
        elif span < 127:
            free = 11 * MS + i if k in (0, 1) else None       # a hole of 63 lines
        else:
            free = None
        recs.append((i, free, 4000, 1, 1, 16))
    recs += [(20 * MS + i, None, 4000, 1, 1, 16) for i in range(20)]
    path = simulator.write_trace(tmp_path / "fit.lttrace", recs, end_ns=30 * MS)
    r = run(path, [("paper", INF, "paper"), ("occ", INF, "occupancy"), ("fit", INF, "occupancy,span-fit")])
    assert llama(r, "paper")["final_huge_pages"] == 2
    assert llama(r, "occ")["final_huge_pages"] == 2
    fit = llama(r, "fit")
    assert fit["final_huge_pages"] == 1
    assert fit["counters"]["span_fit_swaps"] >= 1 and fit["counters"]["spans_opened"] == 128


def test_contain_mixed_keeps_a_dying_inf_context_off_the_inf_pages(tmp_path):
    """(b) Two stacks predicted inf, interleaved: stack 1's blocks live forever, stack 2's
    die 1 ms after allocation.  The paper puts both on inf pages: 400 blocks, two pages,
    each pinned by stack 1's survivors.  With `contain-mixed`, once most of stack 2's
    objects have died (>= 8 placed), the rest go to the longest finite class's pages,
    which empty and are returned: stack 1 fits one page."""
    recs = []
    for i in range(400):
        t = i * 100_000  # 0.1 ms apart
        recs.append((t, None, BLOCK, 1, 1, 16) if i % 2 == 0 else (t, t + MS, BLOCK, 2, 1, 16))
    path = simulator.write_trace(tmp_path / "mixed.lttrace", recs, end_ns=100 * MS)
    r = run(path, [("paper", INF, "paper"), ("cm", INF, "contain-mixed"), ("oracle", "oracle", "contain-mixed")], snapshots_ns=[100 * MS])
    assert llama(r, "paper")["final_huge_pages"] == 2
    cm = llama(r, "cm")
    assert cm["final_huge_pages"] == 1
    assert cm["counters"]["contained_contexts"] == 1
    assert 150 < cm["counters"]["contained_allocs"] < 200
    (p0,) = r["snapshots"][0]["huge_pages"]["llama:cm"]
    assert p0["lc"] == 7 and p0["blocks"].count("R") == 200
    # The oracle's inf objects never die: nothing is contained.
    assert llama(r, "oracle")["counters"]["contained_allocs"] == 0


def test_medium_spans_pack_objects_just_over_a_block(tmp_path):
    """(c) The proxy's loss: never-freed records of 8-10 KiB take two 8 KiB blocks each
    (56% waste for 9000 B).  200 of them: the paper needs 400 blocks (two huge pages);
    `medium-spans` packs 7 into each 64 KiB span of 512 B lines: 29 spans, 232 blocks."""
    recs = [(i, None, 9000, 1, 1, 16) for i in range(200)]
    path = simulator.write_trace(tmp_path / "medium.lttrace", recs, end_ns=10 * MS)
    r = run(path, [("paper", "oracle", "paper"), ("med", "oracle", "medium-spans")],
            snapshots_ns=[10 * MS], snapshot_spans=True)
    assert llama(r, "paper")["final_huge_pages"] == 2
    med = llama(r, "med")
    assert med["final_huge_pages"] == 1
    assert med["counters"]["medium_allocs"] == 200 and med["counters"]["large_allocs"] == 0
    (p0,) = r["snapshots"][0]["huge_pages"]["llama:med"]
    spans = p0["spans"].split()
    assert len(spans) == 29 and all(s.split(":")[1] == "m" for s in spans)
    assert p0["blocks"].count("R") == 232


def test_fine_lines_free_what_a_survivor_pinned(tmp_path):
    """(c) Lines of 128 B with 32 B objects: one survivor in four pins every line of its
    span, which then has no free line and is never recycled.  With 32 B lines
    (`fine-lines`) three lines in four are free and the span is recycled (with
    `occupancy`).  Two huge pages are filled (a span of 512 objects and a 254-block
    object each); 3/4 of the first span's objects die; 784 more arrive: the second span's
    511 free slots and, with fine lines, the first span's 384 holes take them; otherwise a
    third huge page is needed."""
    recs = [(i, 10 * MS + i if i % 4 else None, 32, 1, 1, 16) for i in range(512)]
    recs.append((1000, None, 254 * BLOCK, 2, 1, 16))      # page 0: full
    recs.append((2000, None, 32, 1, 1, 16))               # span 1 closed; span 2 on page 1
    recs.append((3000, None, 254 * BLOCK, 2, 1, 16))      # page 1: full
    recs += [(20 * MS + i, None, 32, 1, 1, 16) for i in range(784)]
    path = simulator.write_trace(tmp_path / "fine.lttrace", recs, end_ns=30 * MS)
    r = run(path, [("occ", INF, "occupancy"), ("fine", INF, "occupancy,fine-lines"),
                   ("paperfine", INF, "fine-lines")])
    assert llama(r, "occ")["final_huge_pages"] == 3
    assert llama(r, "paperfine")["final_huge_pages"] == 3   # the paper never recycles inf spans
    fine = llama(r, "fine")
    assert fine["final_huge_pages"] == 2 and fine["counters"]["occupancy_span_reuses"] == 1


@pytest.mark.parametrize("policy,pages", [
    ("paper", 2), ("size-classes", 1), ("size-classes:3", 1), ("size-classes-from:7", 1),
    ("occupancy,own-blocks,size-classes-from:7", 1)])
def test_size_classes_reuse_the_slots_of_scattered_deaths(tmp_path, policy, pages):
    """(a) A context that mostly dies, predicted inf: 400 objects of 4000 B, three of every
    four die at scattered places, 300 more arrive.  The paper's spans (4 objects, a
    survivor in each) are never recycled, so a second huge page opens; a size-class heap
    (`size-classes`, or `size-classes-from:7` for the inf class) reuses the freed slots
    one at a time and stays on one page."""
    recs = [(i, 10 * MS if i % 4 else None, 4000, 1, 1, 16) for i in range(400)]
    recs += [(20 * MS + i, None, 4000, 1, 1, 16) for i in range(300)]
    path = simulator.write_trace(tmp_path / "scatter.lttrace", recs, end_ns=30 * MS)
    r = run(path, [("x", INF, policy)])
    assert llama(r, "x")["final_huge_pages"] == pages
    if policy != "paper":
        assert r["settings"]["llama_policy"]["llama:x"] == (
            "size-classes:each" if policy == "size-classes" else policy.replace("occupancy,", "occupancy:0.9,"))


def test_size_class_groups_never_share_a_huge_page(tmp_path):
    """(a) Short-lived and never-freed objects interleaved, one size: in one size-class heap
    (the baseline) the survivors keep the shared huge pages of the dead; with `size-classes:3`
    (classes < 1 s in heap 0, the rest in heap 1, whose page ids start at 2^40) the short
    heap's pages go back once its objects die, and only the survivors' pages stay."""
    recs = [(i, 5 * MS if i % 8 else None, 1000, 1, 1, 16) for i in range(16_000)]
    path = simulator.write_trace(tmp_path / "groups.lttrace", recs, end_ns=10 * MS)
    r = simulator.simulate(path, ["g=oracle"], check_invariants=True, check_every=64,
                           policy="size-classes:3", snapshots_ns=[4 * MS, 10 * MS])
    base, g = r["allocators"][0], llama(r, "g")
    assert base["final_huge_pages"] == 8       # 2,000 survivors spread over every page
    assert g["final_huge_pages"] == 1          # 2,000 x 1 KiB packed on heap 1's page
    before, after = (s["huge_pages"]["llama:g"] for s in r["snapshots"])
    assert {p["id"] >> 40 for p in before} == {0, 1}
    assert [p["id"] >> 40 for p in after] == [1]
    assert g["counters"]["heap0_live_huge_pages"] == 0 and g["counters"]["heap1_live_huge_pages"] == 1


def test_divert_mixed_sends_a_context_that_dies_early_to_size_classes(tmp_path):
    """(b) Two stacks predicted inf, interleaved, 1000 B objects: stack 1's (a quarter)
    live forever; stack 2's mostly die 1 ms after allocation (one in 24 lives): a context that mixes
    lifetimes.  The paper bump-allocates both into inf pages, and stack 2's dead leave
    holes no one reuses.  With `divert-mixed`, once half of stack 2's (>= 8) placed objects
    have died before inf's lower bound, its later objects go to the size-class heap beside
    LLAMA's, where each freed slot is reused by the next.  The oracle's inf objects never
    die: nothing is diverted."""
    recs = []
    for i in range(8000):
        t = i * 10_000  # 0.01 ms apart
        stack = 1 if i % 4 == 0 else 2
        dies = stack == 2 and i % 32 != 1
        recs.append((t, t + MS if dies else None, 1000, stack, 1, 16))
    path = simulator.write_trace(tmp_path / "mixed.lttrace", recs, end_ns=100 * MS)
    r = run(path, [("paper", INF, "paper"), ("dm", INF, "divert-mixed"), ("oracle", "oracle", "divert-mixed")])
    paper, dm = llama(r, "paper"), llama(r, "dm")
    assert paper["final_huge_pages"] == 4 and dm["final_huge_pages"] == 3
    assert dm["counters"]["diverted_stacks"] == 1 and 5800 < dm["counters"]["diverted_allocs"] < 6000
    assert dm["counters"]["heap0_live_huge_pages"] == 2   # stack 1's 2 MB and stack 2's first
    assert dm["counters"]["heap1_live_huge_pages"] == 1   # 250 survivors + the ~75 alive
    assert llama(r, "oracle")["counters"]["diverted_allocs"] == 0


@pytest.mark.parametrize("policy,peak,final,small", [
    ("size-classes", 4, 1, None), ("size-classes,segregate-above:8", 1, 1, 300),
    ("size-classes:inf", 2, 1, None), ("segregated", 1, 1, 100),
    ("tolerant", 4, 4, None), ("tolerant,segregate-above:8", 1, 1, 400)])
def test_segregate_above_keeps_a_small_heap_in_one_size_class_heap(tmp_path, policy, peak, final,
                                                                  small):
    """(c) A quiet process: 400 small objects of four classes (dead within 1 ms, 50 ms,
    500 ms, never).  One heap per class holds four huge pages at once (each class's own
    page, as LLAMA's open pages do); `segregate-above:8` keeps every object of a heap below
    8 MiB live in one size-class heap: one page.  `size-classes:inf` is two heaps (inf and
    the rest); the `segregated` preset is that with segregate-above:8.  LLAMA (`tolerant`)
    keeps its four classes' open pages to the end."""
    life = [MS, 50 * MS, 500 * MS, None]
    recs = [(i, None if life[i % 4] is None else i + life[i % 4], 1000, 1 + i % 4, 1, 16)
            for i in range(400)]
    path = simulator.write_trace(tmp_path / "quiet.lttrace", recs, end_ns=2000 * MS)
    r = run(path, [("x", "oracle", policy)])
    a = llama(r, "x")
    assert a["peak_huge_pages"] == peak and a["final_huge_pages"] == final
    assert a["counters"].get("small_heap_allocs") == small  # objects not in their class's heap
    if policy in ("segregated", "tolerant"):
        assert r["settings"]["llama_policy"]["llama:x"] == {
            "segregated": "segregate-above:8,size-classes:inf",
            "tolerant": "occupancy:0.9,own-blocks,span-fit,fine-lines,medium-spans,divert-mixed"}[policy]


def test_paper_policy_is_the_default_byte_for_byte(tmp_path):
    """`--policy paper` (and no --policy) leave the report exactly as it was: no new keys,
    no new counters."""
    rng = random.Random(3)
    recs, t = [], 0
    for _ in range(3000):
        t += rng.randrange(0, 50_000)
        size = rng.choice([rng.randrange(1, 8192), rng.randrange(8192, 40_000)])
        recs.append((t, rng.choice([None, t + rng.randrange(0, 300 * MS)]), size, rng.randrange(30), 1, 16))
    path = simulator.write_trace(tmp_path / "r.lttrace", recs)
    a = tmp_path / "a.json"
    b = tmp_path / "b.json"
    simulator.simulate(path, ["oracle", INF], json_out=a, snapshots_ns=[t // 2])
    simulator.simulate(path, ["oracle", INF], json_out=b, snapshots_ns=[t // 2], policy="paper")
    assert a.read_bytes() == b.read_bytes()
    assert "llama_policy" not in json.loads(a.read_text())["settings"]


def test_policy_errors(tmp_path):
    path = simulator.write_trace(tmp_path / "t.lttrace", [(0, None, 100)])
    for bad, msg in [("nope", "unknown policy 'nope'"), ("occupancy:0", "occupancy threshold"),
                     ("occupancy:1.5", "occupancy threshold"), ("own-blocks", "need occupancy"),
                     ("x=occupancy", "no LLAMA instance is labelled x"), ("=occupancy", "empty label"),
                     ("size-classes:0", "size-classes takes"), ("size-classes:3/2", "size-classes takes"),
                     ("size-classes:1/2/3/4/5/6/7/8", "at most 8 heaps"),
                     ("size-classes,occupancy", "combines with no other switch"),
                     ("size-classes-from:x", "size-classes-from takes"),
                     ("size-classes-from:8", "the trace has classes 0..7"),
                     ("segregate-above:0", "segregate-above takes MiB"),
                     ("segregated,occupancy", "combines with no other switch")]:
        p = subprocess.run([str(simulator.engine_path()), path, "--predictor", "oracle", "--policy", bad],
                           capture_output=True, text=True)
        assert p.returncode == 2 and msg in p.stderr, (bad, p.stderr)


def test_alignment_padding_over_whole_pages_is_valid(tmp_path):
    """The checker once reported a violation on valid input: a 2 MiB object aligned to 8 MiB
    is padded by up to 6 MiB, so whole huge pages of its run (and its tail) hold no byte of
    it.  Both heaps, every policy, checked after every event."""
    recs = [(0, 5 * MS, 2 * MIB, 1, 1, 8 * MIB), (1, None, 100, 2, 1, 16), (2, 3 * MS, 300_000, 3, 1, 16),
            (3, 8 * MS, 3 * MIB + 5, 4, 1, 4 * MIB), (4, None, 9000, 5, 1, 16)]
    path = simulator.write_trace(tmp_path / "align.lttrace", recs, end_ns=10 * MS)
    for policy in ("paper", "occupancy,own-blocks,span-fit,contain-mixed,medium-spans,fine-lines"):
        r = simulator.simulate(path, ["oracle", INF], check_invariants=True, check_every=1, policy=policy)
        assert r["events"]["frees"] == 3


@pytest.mark.parametrize("policy", ["occupancy", "occupancy:0.5,own-blocks,span-fit", "contain-mixed",
                                    "medium-spans", "fine-lines",
                                    "occupancy,own-blocks,span-fit,contain-mixed,medium-spans,fine-lines",
                                    "size-classes", "size-classes:3/7", "occupancy,own-blocks,size-classes-from:4",
                                    "tolerant", "tolerant,segregate-above:1", "segregated",
                                    "size-classes:3/7,segregate-above:1"])
def test_invariants_random_trace_each_policy(tmp_path, policy):
    """Every switch keeps every invariant on the engine tests' random trace (mixed sizes,
    lifetimes and alignments; correct, badly under-predicting and all-inf predictions)."""
    from tests.test_simulator import random_trace
    path = random_trace(tmp_path / "rand.lttrace", 20_000)
    r = simulator.simulate(path, ["oracle", "constant:0", INF], check_invariants=True, check_every=512,
                           policy=policy, timeout=600)
    for a in r["allocators"]:
        c = a["counters"]
        assert c["huge_pages_acquired"] - c["huge_pages_released"] == a["final_huge_pages"]
        assert a["peak_bytes"] >= r["live"]["peak_bytes"]
