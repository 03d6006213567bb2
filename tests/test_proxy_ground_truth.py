"""The bundled proxy workload, profiled under the real sampler, matches its ground truth.

For each version: run proxy_server_vN under `profiler.launch.run_profiled`, read the
profile, symbolize every stack with core.symbolize, take each sample's allocation
site (the first frame after `strip_allocator_frames`), compute each site's T95 with
core.lifetimes (Kaplan-Meier: censored samples, still live at exit, only give a
lower bound; a site whose censored mass keeps the estimate from reaching 95% is inf)
and check its class against workloads/proxy_server/ground_truth.json; and check that
each site is reached through each of its designed callers (one allocation context per
caller), every stack through exactly one.

Needs the native build (`make native`: the sampler and the two proxy binaries);
the profiles come from the session fixture `proxy_profile` (tests/conftest.py).
"""

from __future__ import annotations

import collections
import os

import pytest

from core import lifetimes
from core import symbolize as sym

from tests.proxy_support import GROUND_TRUTH as GT
from tests.proxy_support import proxy_binary as _binary

SCHEME = lifetimes.LabelScheme()  # wall clock, ms; the paper's classes
MIN_SAMPLES = 20          # a ground-truth site must show at least this many samples
UNEXPECTED_SAMPLES = 20   # a proxy site outside the ground truth with this many fails
MIN_CALLERS = 3           # designed call paths (allocation contexts) per site, at least
MIN_CONTEXTS = 40         # ... and per version, in all

VERSIONS = sorted(GT["versions"])


def test_ground_truth_is_well_formed():
    ids = [s["id"] for s in GT["sites"]]
    assert len(ids) == len(set(ids))
    classes = {s["class"] for s in GT["sites"]}
    assert classes <= set(SCHEME.class_names)
    assert "inf" in classes and len(classes - {"inf"}) >= 4
    for version in VERSIONS:
        functions = [s["functions"][version] for s in GT["sites"]]
        assert len(functions) == len(set(functions)), f"{version}: one function, two sites"
        callers = [s["callers"][version] for s in GT["sites"]]
        assert all(len(c) == len(set(c)) >= MIN_CALLERS for c in callers), version
        assert sum(map(len, callers)) >= MIN_CONTEXTS, version
    for s in GT["sites"]:
        if s["lifetime_ms"]:  # a designed range sits inside its class
            lo, hi = s["lifetime_ms"]
            assert SCHEME.class_names[SCHEME.label(lo)] == s["class"]
            assert SCHEME.class_names[SCHEME.label(hi * 2)] == s["class"]  # 2x headroom


@pytest.mark.parametrize("version", VERSIONS)
def test_site_functions_are_symbols_of_the_binary(version):
    """Cheap guard: every site function exists (not inlined, cloned or renamed away)."""
    module = sym.ElfModule(str(_binary(version)))
    assert module.symtab is not None, "the binary is stripped"
    names = {sym.demangle(item[3]) for item in module.symtab._items}
    wanted = {f for s in GT["sites"] for f in [s["functions"][version], *s["callers"][version]]}
    missing = sorted(wanted - names)
    assert not missing, f"{version}: no such function symbols: {missing}"


def site_table(profile, binary: str) -> tuple[dict[str, dict], dict[str, sym.ModuleStatus]]:
    """Per allocation site function: samples, censored count, T95 (ms), class, and
    whether the site is in `binary`; and the symbolizer's status per module."""
    symbolizer = sym.Symbolizer(profile.mappings, cache=sym.ModuleCache())
    site_of_stack = {}
    for stack_id, stack in profile.stacks.items():
        frames = symbolizer.symbolize_stack(stack.addresses, leaf_is_return_address=True)
        site = sym.allocation_site(frames)
        site_of_stack[stack_id] = (site.function if site else "<none>",
                                   bool(site) and os.path.realpath(site.module) == binary)
    observations = collections.defaultdict(list)
    for s in profile.samples:
        ms = (s.observed_age_ns if s.censored else s.free_monotonic_ns - s.alloc_monotonic_ns) / 1e6
        observations[site_of_stack[s.stack_id]].append((ms, s.censored, s.weight or 1.0))
    table = {}
    for (function, in_binary), obs in observations.items():
        t95 = lifetimes.t95([o[0] for o in obs], [o[1] for o in obs], [o[2] for o in obs])
        table[function] = {"samples": len(obs), "censored": sum(o[1] for o in obs),
                           "t95_ms": t95, "class": SCHEME.class_names[SCHEME.label(t95)],
                           "in_binary": in_binary}
    return table, symbolizer.module_status()


@pytest.mark.parametrize("version", VERSIONS)
def test_profiled_sites_match_ground_truth(version, proxy_profile):
    from profile_format.container import read_profile

    binary = _binary(version)
    profile = read_profile(proxy_profile(version))
    assert profile.trailer is not None, "the profile has no trailer"
    table, modules = site_table(profile, os.path.realpath(binary))
    own = [m for path, m in modules.items() if os.path.realpath(path) == os.path.realpath(binary)]
    assert own and all(m.status == sym.OK for m in own), modules

    lines = [f"{version}: {len(profile.samples)} samples"]
    failures = []
    expected = {}
    for site in GT["sites"]:
        function = site["functions"][version]
        expected[function] = site
        row = table.get(function)
        if row is None:
            failures.append(f"{site['id']}: no samples at {function}")
            continue
        lines.append(f"  {site['id']:15} {row['samples']:5} samples {row['censored']:5} censored"
                     f"  T95 {row['t95_ms']:10.2f} ms  {row['class']:6} (want {site['class']})")
        if row["samples"] < MIN_SAMPLES:
            failures.append(f"{site['id']}: only {row['samples']} samples")
        elif row["class"] != site["class"]:
            failures.append(f"{site['id']}: class {row['class']} (T95 {row['t95_ms']:.2f} ms), "
                            f"want {site['class']}")
    for function, row in sorted(table.items()):
        if function not in expected and row["in_binary"] and row["samples"] >= UNEXPECTED_SAMPLES:
            failures.append(f"site outside the ground truth: {function} ({row['samples']} samples)")
    print("\n".join(lines))
    assert not failures, "\n".join(lines + failures)


@pytest.mark.parametrize("version", VERSIONS)
def test_profiled_sites_take_their_call_paths(version, proxy_profile):
    """Each site is reached through each of its designed callers, every stack through
    exactly one: so the site has (at least) one allocation context per caller."""
    from profile_format.container import read_profile

    profile = read_profile(proxy_profile(version))
    symbolizer = sym.Symbolizer(profile.mappings, cache=sym.ModuleCache())
    samples = collections.Counter(s.stack_id for s in profile.samples)
    seen = collections.defaultdict(collections.Counter)  # site function -> caller -> samples
    contexts = collections.defaultdict(set)  # site function -> distinct stacks (functions)
    for stack_id, stack in profile.stacks.items():
        if not samples[stack_id]:
            continue
        frames = sym.strip_allocator_frames(
            symbolizer.symbolize_stack(stack.addresses, leaf_is_return_address=True))
        if frames:
            functions = [f.function for f in frames]
            seen[functions[0]].update({c: samples[stack_id] for c in functions[1:]})
            contexts[functions[0]].add(tuple(functions))

    failures, lines = [], []
    for site in GT["sites"]:
        function, callers = site["functions"][version], site["callers"][version]
        through = {c: seen[function][c] for c in callers}
        lines.append(f"  {site['id']:15} {len(contexts[function]):3} stacks  " +
                     "  ".join(f"{c.split('(')[0].rsplit('::', 1)[-1]}:{n}"
                               for c, n in through.items()))
        failures += [f"{site['id']}: no samples through {c}" for c, n in through.items() if not n]
        for stack in contexts[function]:
            hits = [c for c in callers if c in stack[1:]]
            if len(hits) != 1:
                failures.append(f"{site['id']}: a stack through {len(hits)} of its callers: "
                                f"{list(stack[1:6])}")
    print("\n".join(lines))
    assert not failures, "\n".join(lines + failures)
