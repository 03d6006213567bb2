"""The sampler's in-process symbolizer against the offline one (core/symbolize/).

Online prediction feeds the model frame strings made inside the process, with no
malloc; the model was trained on frames made offline.  These tests hold the two to
the same strings: every frame of every stack of real programs (the proxy workload,
a pyenv CPython), and the same allocator-frame stripping decisions.
"""

from __future__ import annotations

import json
import pathlib
import random
import shutil
import subprocess

import pytest

from core import symbolize
from tests.sampler_support import REPO, profile_files, read_all, run_sampled, sampler_library

NAME_CAP = 511  # the sampler keeps this many bytes of a frame string
STRIP_RULES = REPO / "build" / "tests" / "native" / "lifetime_strip_rules"
MODULE_TOKENS = REPO / "build" / "tests" / "native" / "lifetime_module_tokens"
MODULE_TOKEN_VECTORS = REPO / "tests" / "data" / "module_token_vectors.json"


def _programs(tmp_path) -> list:
    from tests.proxy_support import proxy_binary

    runs = [[str(proxy_binary("v2")), "--seconds", "1"]]
    pyenv = shutil.which("pyenv")
    if pyenv:
        prefix = subprocess.run([pyenv, "prefix", "3.11.7"], capture_output=True, text=True)
        python = pathlib.Path(prefix.stdout.strip()) / "bin" / "python3.11"
        if prefix.returncode == 0 and python.exists():
            runs.append([str(python), "-c",
                         "import json; d = [json.dumps({'k': i, 'v': [str(j) for j in "
                         "range(i % 40)]}) for i in range(20000)]; print(len(d))"])
    return runs


@pytest.fixture(scope="module")
def online_profiles(tmp_path_factory):
    sampler_library()
    out = tmp_path_factory.mktemp("online-sym")
    for argv in _programs(out):
        run_sampled(argv, out, interval=16384,
                    extra_env={"LIFETIME_SYMBOLIZE": "1", "PYTHONMALLOC": "malloc"})
    profiles = read_all(out)
    assert len(profiles) == len(profile_files(out)) >= 1
    return profiles


def _same(online: str, offline: str) -> bool:
    return online == offline or (len(online.encode()) == NAME_CAP
                                 and offline.encode().startswith(online.encode()))


def test_in_process_frames_match_the_offline_symbolizer(online_profiles):
    checked = 0
    for prof in online_profiles:
        sym = symbolize.Symbolizer(prof.mappings, symbolize.ModuleCache(), inline_frames=False)
        for stack in prof.stacks.values():
            online = [f.function for f in stack.frames]
            offline = [f.function for f in sym.symbolize_stack(list(stack.addresses),
                                                                leaf_is_return_address=True)]
            assert len(online) == len(stack.addresses) == len(offline)
            for a, b in zip(online, offline):
                assert _same(a, b), (prof.path, a, b)
            checked += len(online)
    assert checked > 100  # real stacks, many frames


TRICKY = [
    ("libc.so.6", True, "__libc_malloc"),
    ("libc.so.6", True, "__GI___libc_malloc"),
    ("libc.so.6", True, "_int_malloc"),
    ("libc.so.6", True, "__strdup"),
    ("libc.so.6", False, "<libc+?>"),
    ("libstdc++.so.6.0.30", False, "<libstdc+++?>"),
    ("app", False, "<app+?>"),
    ("liblifetime_sampler.so", False, "<liblifetime_sampler+?>"),
    ("liblifetime_sampler.so", True, "malloc"),
    ("libstdc++.so.6.0.30", True, "operator new(unsigned long)"),
    ("app", True, "operator new[](unsigned long, std::nothrow_t const&)"),
    ("app", True, "operator delete(void*, unsigned long)"),
    ("app", True, "void std::vector<int, std::allocator<int> >::_M_realloc_insert<int>(int&&)"),
    ("app", True, "std::vector<int> app::f<int>()"),
    ("app", True, "app::Cache::operator()(int) const"),
    ("app", True, "app::Buf::operator<<(int) [clone .isra.0] [clone .cold]"),
    ("app", True, "(anonymous namespace)::Parse(char const*)"),
    ("app", True, "std::__cxx11::basic_string<char, std::char_traits<char>, "
                  "std::allocator<char> >::_M_create(unsigned long&, unsigned long)"),
    ("app", True, "__gnu_cxx::new_allocator<int>::allocate(unsigned long, void const*)"),
    ("app", True, "app::operator new(unsigned long)"),
    ("app", True, "mallocate"),
    ("app", True, "app::f(int)::{lambda(int)#1}::operator()(int) const"),
    ("app", True, "operator\"\" _kb(unsigned long long)"),
    ("app", True, "app::X::operator std::vector<int, std::allocator<int> >() const"),
]


def test_allocator_frame_rules_match_the_offline_rules(online_profiles):
    if not STRIP_RULES.exists():
        pytest.fail(f"{STRIP_RULES} is not built: run `make native`")
    cases = list(TRICKY)
    for prof in online_profiles:
        sym = symbolize.Symbolizer(prof.mappings, symbolize.ModuleCache(), inline_frames=False)
        for stack in prof.stacks.values():
            for f in sym.symbolize_stack(list(stack.addresses), leaf_is_return_address=True):
                cases.append((pathlib.Path(f.module).name, f.resolved, f.function))
    cases = sorted(set(c for c in cases if "\n" not in c[2] and "\t" not in c[0]))
    stdin = "".join(f"{m}\t{int(r)}\t{fn}\n" for m, r, fn in cases)
    got = subprocess.run([str(STRIP_RULES)], input=stdin, capture_output=True, text=True,
                         check=True).stdout.split()
    assert len(got) == len(cases)
    for (module, resolved, function), decision in zip(cases, got):
        frame = symbolize.SymbolizedFrame(
            address=0, function=function, module=f"/x/{module}",
            symbol=function if resolved else None)
        expected = symbolize.allocator_rule(frame) is not None
        assert decision == str(int(expected)), (module, resolved, function)
    assert len(cases) > 50


def _c_module_tokens(paths: list[str]) -> list[str]:
    if not MODULE_TOKENS.exists():
        pytest.fail(f"{MODULE_TOKENS} is not built: run `make native`")
    out = subprocess.run([str(MODULE_TOKENS)], input="".join(p + "\n" for p in paths).encode(),
                         capture_output=True, check=True).stdout.decode("utf-8")
    return out.splitlines()


def test_module_tokens_match_the_shared_vectors():
    """The sampler's version-free module names (lt_module_name) against
    tests/data/module_token_vectors.json, which pins the offline rule too
    (tests/test_symbolize.py::test_module_token_vectors)."""
    cases = json.loads(MODULE_TOKEN_VECTORS.read_text("utf-8"))["cases"]
    got = _c_module_tokens([c["path"] for c in cases])
    assert got == [c["token"] for c in cases]
    for c in cases:
        assert symbolize.module_token(c["path"]) == c["token"]


def test_module_tokens_match_offline_on_random_paths():
    rng = random.Random(11)
    parts = ["lib", "foo", "so", ".so", ".so.", "-", "_", ".", "1", "2.0", "38", "x86", "64",
             "/", "py", ".cpython-311", ".abi3", ".pypy", " (deleted)", "a", "Z", "++"]
    paths = ["/usr/lib/" + "".join(rng.choice(parts) for _ in range(rng.randint(1, 9)))
             for _ in range(3000)]
    paths = [p for p in paths if "\n" not in p]
    got = _c_module_tokens(paths)
    assert len(got) == len(paths)
    for path, token in zip(paths, got):
        assert token == symbolize.module_token(path), path
