"""Separate debug files and sysroots (core.symbolize.debug_files, ModuleCache):
split builds made here with gcc/objcopy, real Debian -dbgsym packages unpacked under a
private root, and the sampler's in-process symbolizer finding the same files."""

import dataclasses
import json
import os
import pathlib
import shutil
import subprocess

import pytest

from core.errors import UsageError
from core import symbolize as sym
from profile_format import profile_pb2
from tests.symbolize_support import name_at


# ---------------------------------------------------------------- separate debug files

DEBUG_SOURCE = r"""
#include <stdio.h>
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
static NOINLINE int static_alpha(int x) { volatile int v = x; return v * 3 + 1; }
int NOINLINE exported_fn(int x) { volatile int v = x; return v - 5; }
static NOINLINE long static_beta(long x) { volatile long v = x; return v ^ 0x77; }
static NOINLINE void *static_gamma(size_t n) { return malloc(n + (size_t)static_alpha(1)); }
int main(int argc, char **argv) {
  (void)argv;
  printf("%d %ld %p\n", exported_fn(argc), static_beta(argc), static_gamma(argc));
  return 0;
}
"""
DEBUG_BUILD_ID = "5eed00000000000000000000000000000000d00d"
DEBUG_OTHER_BUILD_ID = "5eed00000000000000000000000000000000beef"
STATIC_FUNCTIONS = ("static_alpha", "static_beta", "static_gamma")
LOAD_BIAS = 0x5555_5555_4000


def _function_symbols(path) -> dict:
    """name -> (value, size) of the FUNC symbols of path's .symtab."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        table = ELFFile(f).get_section_by_name(".symtab")
        return {s.name: (s["st_value"], s["st_size"]) for s in table.iter_symbols()
                if s["st_info"]["type"] == "STT_FUNC" and s["st_size"]} if table else {}


def _load_mappings(path, recorded_path, build_id: bytes) -> list:
    """The mappings a process would have recorded for path loaded at LOAD_BIAS."""
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        loads = [(s["p_vaddr"], s["p_memsz"], s["p_offset"]) for s in ELFFile(f).iter_segments()
                 if s["p_type"] == "PT_LOAD"]
    return [profile_pb2.Mapping(id=i + 1, start=LOAD_BIAS + vaddr, limit=LOAD_BIAS + vaddr + size,
                                file_offset=offset, path=recorded_path, build_id=build_id)
            for i, (vaddr, size, offset) in enumerate(loads)]


@dataclasses.dataclass
class SplitBuild:
    dir: pathlib.Path
    full: str          # built with -g, .symtab and DWARF
    stripped: str      # strip --strip-debug --strip-unneeded + --add-gnu-debuglink=app.debug
    debug: str         # objcopy --only-keep-debug
    other_debug: str   # the debug file of a rebuild with another build id
    functions: dict    # name -> (vaddr, size), from the full build

    def address(self, name: str) -> int:
        vaddr, size = self.functions[name]
        return LOAD_BIAS + vaddr + size // 2

    def mappings(self, recorded_path: str, build_id: str = DEBUG_BUILD_ID) -> list:
        return _load_mappings(self.stripped, recorded_path, bytes.fromhex(build_id))

    def place(self, dest: pathlib.Path, what: str = "stripped") -> pathlib.Path:
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(getattr(self, what), dest)
        return dest


def _split(d: pathlib.Path, build_id: str, name: str) -> tuple[str, str, str]:
    src = d / "app.c"
    src.write_text(DEBUG_SOURCE)
    work = d / name
    work.mkdir()
    full, debug, stripped = work / "app.full", work / "app.debug", work / "app"
    subprocess.run(["gcc", "-O2", "-g", "-fno-reorder-functions", "-fPIE", "-pie", "-rdynamic",
                    f"-Wl,--build-id=0x{build_id}", "-o", str(full), str(src)],
                   check=True, capture_output=True)
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", "-o", str(stripped), str(full)],
                   check=True)
    # objcopy records the debug file's basename and CRC32; run beside it.
    subprocess.run(["objcopy", "--add-gnu-debuglink=app.debug", "app"], check=True, cwd=work)
    return str(full), str(stripped), str(debug)


@pytest.fixture(scope="module")
def split_build(tmp_path_factory):
    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.skip("needs gcc and objcopy")
    d = tmp_path_factory.mktemp("debugfiles")
    full, stripped, debug = _split(d, DEBUG_BUILD_ID, "main")
    _, _, other_debug = _split(d, DEBUG_OTHER_BUILD_ID, "other")
    functions = _function_symbols(full)
    assert set(STATIC_FUNCTIONS) | {"exported_fn"} <= set(functions)
    assert _function_symbols(stripped) == {}  # no .symtab left
    return SplitBuild(d, full, stripped, debug, other_debug, functions)


def _build_id_path(root: pathlib.Path, build_id: str = DEBUG_BUILD_ID) -> pathlib.Path:
    return root / ".build-id" / build_id[:2] / (build_id[2:] + ".debug")


def _names(build: SplitBuild, mappings, cache) -> dict:
    s = sym.Symbolizer(mappings, cache=cache)
    return {name: name_at(s, build.address(name)) for name in (*STATIC_FUNCTIONS, "exported_fn")}


def _named_statics(names: dict) -> bool:
    return all(names[f] == f for f in STATIC_FUNCTIONS)


def test_stripped_split_binary_names_static_functions_only_with_its_debug_file(split_build):
    b = split_build
    lone = b.place(b.dir / "lone" / "app")  # no debug file anywhere near
    names = _names(b, b.mappings(str(lone)), sym.ModuleCache(debug_dirs=()))
    assert names["exported_fn"] == "exported_fn"  # -rdynamic: in .dynsym
    # Static functions are absent from .dynsym: a module token, never a neighbour's name.
    assert all(names[f] == "<app+?>" for f in STATIC_FUNCTIONS), names


def test_debug_file_by_build_id_in_a_debug_dir(split_build, tmp_path):
    b = split_build
    lone = b.place(tmp_path / "bin" / "app")
    debug_dir = tmp_path / "debug"
    b.place(_build_id_path(debug_dir), "debug")
    cache = sym.ModuleCache(debug_dirs=[str(tmp_path / "nowhere"), str(debug_dir)])
    mappings = b.mappings(str(lone))
    assert _named_statics(_names(b, mappings, cache))
    module = cache.get(str(lone))
    assert module.debug_file == str(_build_id_path(debug_dir)) and not module.debug_problems
    status = sym.Symbolizer(mappings, cache=cache).check_all_modules()[str(lone)]
    assert status.status == sym.OK and f"symbols from {module.debug_file}" in status.detail
    # Not used without the directory (the default /usr/lib/debug does not have it).
    assert not _named_statics(_names(b, mappings, sym.ModuleCache(debug_dirs=())))


def test_debug_file_under_a_build_id_of_another_build_is_refused(split_build, tmp_path):
    b = split_build
    lone = b.place(tmp_path / "bin" / "app")
    debug_dir = tmp_path / "debug"
    b.place(_build_id_path(debug_dir), "other_debug")  # right place, wrong file
    cache = sym.ModuleCache(debug_dirs=[str(debug_dir)])
    assert not _named_statics(_names(b, b.mappings(str(lone)), cache))
    [problem] = cache.get(str(lone)).debug_problems
    assert DEBUG_OTHER_BUILD_ID in problem and "not used" in problem


@pytest.mark.parametrize("layout", ["beside", "dot-debug", "global"])
def test_debug_file_through_gnu_debuglink(split_build, tmp_path, layout):
    """GDB's three places for a .gnu_debuglink name: next to the binary, in .debug/
    beside it, and under a debug directory at the binary's own directory."""
    b = split_build
    binary = b.place(tmp_path / "opt" / "bin" / "app")
    debug_dir = tmp_path / "debug"
    dest = {"beside": binary.parent / "app.debug",
            "dot-debug": binary.parent / ".debug" / "app.debug",
            "global": debug_dir / str(binary.parent).lstrip("/") / "app.debug"}[layout]
    b.place(dest, "debug")
    # No build id recorded, and none under the debug dir: the debuglink alone finds it.
    cache = sym.ModuleCache(debug_dirs=[str(debug_dir)])
    assert _named_statics(_names(b, b.mappings(str(binary)), cache))
    assert cache.get(str(binary)).debug_file == str(dest)


def test_debuglink_with_a_wrong_crc_is_not_used_and_is_reported(split_build, tmp_path):
    b = split_build
    binary = b.place(tmp_path / "bin" / "app")
    bad = b.place(binary.parent / "app.debug", "debug")
    with open(bad, "ab") as f:  # still a valid ELF file with the right build id
        f.write(b"\0" * 16)
    cache = sym.ModuleCache(debug_dirs=())
    mappings = b.mappings(str(binary))
    names = _names(b, mappings, cache)
    assert all(names[f] == "<app+?>" for f in STATIC_FUNCTIONS), names
    module = cache.get(str(binary))
    assert module.debug_file == "" and len(module.debug_problems) == 1
    assert "CRC32" in module.debug_problems[0] and "not used" in module.debug_problems[0]
    status = sym.Symbolizer(mappings, cache=cache).check_all_modules()[str(binary)]
    assert status.usable and "CRC32" in status.detail  # reported in the manifest's modules
    # A good copy under .debug/ is found after the bad one is refused.
    b.place(binary.parent / ".debug" / "app.debug", "debug")
    cache = sym.ModuleCache(debug_dirs=())
    assert _named_statics(_names(b, mappings, cache))
    assert "CRC32" in cache.get(str(binary)).debug_problems[0]


def test_sysroot_with_build_id_and_debuglink_layouts(split_build, tmp_path):
    b = split_build
    recorded = "/usr/lib/lifetime-test/app"  # the path on the profiled machine
    root = tmp_path / "root"
    b.place(root / recorded.lstrip("/"))
    b.place(_build_id_path(root / "usr/lib/debug"), "debug")
    cache = sym.ModuleCache(sysroot=str(root))  # default debug dir, under the sysroot
    mappings = b.mappings(recorded)
    assert _named_statics(_names(b, mappings, cache))
    status = sym.Symbolizer(mappings, cache=cache).check_all_modules()[recorded]
    assert status.status == sym.OK
    assert f"read {root}{recorded}" in status.detail and "symbols from" in status.detail
    # GDB's global debuglink layout under the sysroot: /usr/lib/debug/<recorded dir>/name.
    root2 = tmp_path / "root2"
    b.place(root2 / recorded.lstrip("/"))
    dest = b.place(root2 / "usr/lib/debug" / "usr/lib/lifetime-test" / "app.debug", "debug")
    cache = sym.ModuleCache(sysroot=str(root2))
    assert _named_statics(_names(b, b.mappings(recorded, build_id=""), cache))
    assert cache.get(str(root2 / recorded.lstrip("/"))).debug_file == str(dest)
    # An absolute symlink inside the sysroot points into the sysroot.
    (root2 / "usr/lib/lifetime-test/app-link").symlink_to("/usr/lib/lifetime-test/app")
    assert cache.resolve("/usr/lib/lifetime-test/app-link") == str(root2 / recorded.lstrip("/"))


def test_sysroot_without_the_file(split_build, tmp_path):
    b = split_build
    root = tmp_path / "empty-root"
    root.mkdir()
    cache = sym.ModuleCache(sysroot=str(root))
    missing = "/usr/lib/lifetime-test/no-such-app"
    s = sym.Symbolizer(b.mappings(missing), cache=cache)
    assert name_at(s, b.address("exported_fn")) == "<no-such-app+?>"
    status = s.module_status()[missing]
    assert status.status == sym.MISSING and str(root) in status.detail
    # A file the sysroot lacks but this machine has is read from here (build ids decide).
    s = sym.Symbolizer(b.mappings(b.full), cache=cache)
    assert name_at(s, b.address("static_beta")) == "static_beta"
    assert s.module_status()[b.full].status == sym.OK


def test_bad_debug_dir_and_sysroot_options(tmp_path):
    # A missing debug directory is skipped by the cache ...
    cache = sym.ModuleCache(debug_dirs=[str(tmp_path / "no-such-dir")])
    assert sym.find_debug_file("/bin/true", b"\x01\x02\x03", None, cache.debug_dirs).path == ""
    # ... but named explicitly on a command line it is an error, naming the option.
    with pytest.raises(ValueError, match="--debug-dir .*no-such-dir: not a directory"):
        sym.check_search_paths([str(tmp_path / "no-such-dir")], None)
    with pytest.raises(ValueError, match="--sysroot .*: not a directory"):
        sym.check_search_paths(None, str(tmp_path / "no-such-root"))
    (tmp_path / "root" / "dbg").mkdir(parents=True)
    sym.check_search_paths(["/dbg"], str(tmp_path / "root"))  # found under the sysroot
    sym.check_search_paths(None, None)


def test_cli_flags_reach_the_dataset_config(tmp_path):
    from lifetime import cli
    from core.symbol_options import symbol_options
    from pipeline.dataset import DatasetConfig

    parser = cli.build_parser()
    for argv in (["build-dataset", "--profiles", "x", "--out", str(tmp_path)],
                 ["characterize", "--profiles", "x", "--out", str(tmp_path)],
                 ["evaluate-online", "p.ltprof", "--model", str(tmp_path)],
                 ["simulate", "p.ltprof", "--train", str(tmp_path), "--out", str(tmp_path)],
                 ["pprof", "p.ltprof", "-o", str(tmp_path / "p.pb.gz")]):
        args, _ = parser.parse_known_args(argv + ["--debug-dir", str(tmp_path),
                                                  "--debug-dir", "/usr/lib/debug",
                                                  "--sysroot", str(tmp_path)])
        options = symbol_options(args)
        assert options == {"debug_dirs": (str(tmp_path), "/usr/lib/debug"),
                           "sysroot": str(tmp_path)}, argv
        args, _ = parser.parse_known_args(argv + ["--debug-dir", str(tmp_path / "missing")])
        with pytest.raises(UsageError, match="--debug-dir .*missing: not a directory"):
            symbol_options(args)
        args, _ = parser.parse_known_args(argv)
        assert symbol_options(args) == {"debug_dirs": sym.DEFAULT_DEBUG_DIRS, "sysroot": ""}
    # Recorded in the manifest's configuration (manifest["config"] is config.to_json()).
    config = DatasetConfig(debug_dirs=(str(tmp_path),), sysroot=str(tmp_path)).to_json()
    assert json.loads(json.dumps(config))["debug_dirs"] == [str(tmp_path)]
    assert config["sysroot"] == str(tmp_path)


# ---------------------------------------------------------------- real Debian binaries

def _text_range(path) -> tuple[int, int]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        text = ELFFile(f).get_section_by_name(".text")
        return text["sh_addr"], text["sh_addr"] + text["sh_size"]


def _dynsym_ranges(path) -> list[tuple[int, int]]:
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        return [(s["st_value"], s["st_value"] + s["st_size"])
                for s in ELFFile(f).get_section_by_name(".dynsym").iter_symbols()
                if s["st_info"]["type"] in ("STT_FUNC", "STT_GNU_IFUNC", "STT_LOOS")
                and s["st_shndx"] != "SHN_UNDEF" and s["st_size"]]


def test_debian_stripped_library_never_names_an_address_past_a_symbol(tmp_path):
    """Debian's libc.so.6 keeps only .dynsym (static functions such as _int_malloc are
    absent): an address that no .dynsym function covers must stay unnamed, however
    close the nearest symbol below it is."""
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    if not os.path.exists(libc):
        pytest.skip(f"no {libc}")
    cache = sym.ModuleCache(debug_dirs=())  # as if no debug files were installed
    module = cache.get(libc)
    assert module.symtab is None and module.dynsym is not None, "expected a stripped libc"
    lo, hi = _text_range(libc)
    ranges = _dynsym_ranges(libc)
    mappings = _load_mappings(libc, libc, module.build_id)
    s = sym.Symbolizer(mappings, cache=cache)
    gaps = covered = 0
    for vaddr in range(lo, hi, 61):
        inside = any(a <= vaddr < b for a, b in ranges)
        [frame] = s.symbolize_address(LOAD_BIAS + vaddr, False)
        if inside:
            covered += 1
            assert frame.resolved and frame.symbol_offset < max(b - a for a, b in ranges)
        else:
            gaps += 1
            assert frame.function == "<libc+?>" and not frame.resolved, hex(vaddr)
    assert gaps > 100 and covered > 100, (gaps, covered)


DEBIAN_PACKAGES = {
    # name: (binary package, -dbg package, file in the binary package)
    "vsftpd": ("vsftpd", "vsftpd-dbg", "/usr/sbin/vsftpd"),  # a C server, .dynsym only
    "liblua5.4": ("liblua5.4-0", "liblua5.4-0-dbg",
                  "/usr/lib/x86_64-linux-gnu/liblua5.4.so.0"),  # a library, its API in .dynsym
}


def _cache_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("LIFETIME_CACHE_DIR",
                                       os.path.expanduser("~/.cache/lifetime-models")))


def debian_root(name: str) -> pathlib.Path:
    """The binary and -dbg packages of DEBIAN_PACKAGES[name], downloaded with
    `apt-get download` and unpacked with `dpkg-deb -x` under a private root (cached under
    $LIFETIME_CACHE_DIR/debian-dbg/NAME).  Skips, saying why, if they cannot be fetched."""
    root = _cache_dir() / "debian-dbg" / name
    done = root / ".unpacked"
    if done.exists():
        return root
    if shutil.which("apt-get") is None or shutil.which("dpkg-deb") is None:
        pytest.skip("needs apt-get and dpkg-deb to fetch Debian packages")
    debs = root.parent / f"{name}.debs"
    debs.mkdir(parents=True, exist_ok=True)
    packages = DEBIAN_PACKAGES[name][:2]
    got = subprocess.run(["apt-get", "download", *packages], cwd=debs, capture_output=True,
                         text=True)
    files = sorted(debs.glob("*.deb"))
    if got.returncode != 0 or len(files) < 2:
        pytest.skip(f"cannot fetch {' '.join(packages)} with apt-get download (run "
                    f"`apt-get update`?): {got.stderr.strip()[-300:]}")
    for deb in files:
        subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], check=True)
    done.write_text("".join(f.name + "\n" for f in files))
    return root


def named_shares(root: pathlib.Path, recorded: str) -> dict:
    """Shares of addresses named without and with the package's debug files: every
    function of the debug file's .symtab at its middle byte, and every 16th byte of
    .text; also how many were named wrongly (never allowed)."""
    binary = sym.ModuleCache(sysroot=str(root)).resolve(recorded)
    with_debug = sym.ModuleCache(sysroot=str(root))  # SYSROOT/usr/lib/debug
    without = sym.ModuleCache(debug_dirs=(), sysroot=str(root))
    module = with_debug.get(binary)
    assert module.debug_file, f"no debug file found for {binary}: {module.debug_problems}"
    truth = module.symtab  # the debug file's own .symtab: the ground truth
    mappings = _load_mappings(binary, recorded, module.build_id)
    lo, hi = _text_range(binary)
    functions = sorted({start + size // 2 for start, size, _, _ in truth._items})
    samples = {"functions": functions, "text": list(range(lo, hi, 16))}
    out = {}
    for kind, vaddrs in samples.items():
        for label, cache in (("without", without), ("with", with_debug)):
            s = sym.Symbolizer(mappings, cache=cache)
            named = wrong = 0
            for vaddr in vaddrs:
                [frame] = s.symbolize_address(LOAD_BIAS + vaddr, False)
                if frame.resolved:
                    named += 1
                    expected = truth.lookup(vaddr)
                    wrong += expected is None or expected[1] != vaddr - frame.symbol_offset
            out[f"{kind}_{label}"] = named / len(vaddrs)
            out[f"{kind}_{label}_wrong"] = wrong
        out[f"{kind}_count"] = len(vaddrs)
    return out


@pytest.mark.parametrize("name", sorted(DEBIAN_PACKAGES))
def test_debian_dbg_package_under_a_private_root(name):
    """A Debian package and its -dbg package unpacked under a private root (a sysroot):
    the profile's recorded path is read from the root, its debug file found by build id
    under ROOT/usr/lib/debug; far more is named with it, and nothing wrongly."""
    root = debian_root(name)
    recorded = DEBIAN_PACKAGES[name][2]
    shares = named_shares(root, recorded)
    print(f"\n{name}: named without / with the -dbg package: functions "
          f"{shares['functions_without']:.1%} / {shares['functions_with']:.1%} of "
          f"{shares['functions_count']}; .text bytes (every 16th) {shares['text_without']:.1%}"
          f" / {shares['text_with']:.1%} of {shares['text_count']}")
    assert shares["functions_with"] > 0.99 and shares["text_with"] > 0.9, shares
    assert shares["functions_without"] < shares["functions_with"] - 0.2, shares
    assert all(shares[k] == 0 for k in shares if k.endswith("_wrong")), shares


# ---------------------------------------------------------------- online (in the sampler)

ONLINE_SOURCE = r"""
#include <stdlib.h>
#define NOINLINE __attribute__((noinline, noclone))
static void *volatile sink;
static NOINLINE void *static_make(size_t n) { void *p = malloc(n); sink = p; return p; }
static NOINLINE void static_loop(int rounds) {
  for (int i = 0; i < rounds; i++) free(static_make(64 + (size_t)(i % 7) * 16));
  __asm__ volatile("" ::: "memory");
}
int main(void) { static_loop(200000); return 0; }
"""


@pytest.mark.parametrize("layout", ["build-id", "debuglink"])
def test_in_process_symbolizer_uses_separate_debug_files(tmp_path, layout):
    """The sampler's symbolizer (LIFETIME_SYMBOLIZE=1) finds the same debug files: by
    build id under LIFETIME_DEBUG_DIR, or through .gnu_debuglink; its frames equal the
    offline ones given the same debug directory."""
    from tests.sampler_support import only_profile, run_sampled, sampler_library

    if shutil.which("gcc") is None or shutil.which("objcopy") is None:
        pytest.skip("needs gcc and objcopy")
    sampler_library()
    src = tmp_path / "online.c"
    src.write_text(ONLINE_SOURCE)
    full, app = tmp_path / "full", tmp_path / "bin" / "app"
    app.parent.mkdir()
    subprocess.run(["gcc", "-O2", "-g", "-fno-omit-frame-pointer", "-fPIE", "-pie",
                    f"-Wl,--build-id=0x{DEBUG_BUILD_ID}", "-o", str(full), str(src)], check=True)
    debug = tmp_path / ("app.debug")
    subprocess.run(["objcopy", "--only-keep-debug", str(full), str(debug)], check=True)
    subprocess.run(["strip", "--strip-debug", "--strip-unneeded", "-o", str(app), str(full)],
                   check=True)
    debug_dir = tmp_path / "debug"
    if layout == "build-id":
        dest = _build_id_path(debug_dir)
    else:
        subprocess.run(["objcopy", f"--add-gnu-debuglink={debug}", str(app)], check=True)
        dest = debug_dir / str(app.parent).lstrip("/") / "app.debug"
    dest.parent.mkdir(parents=True)
    shutil.copy(debug, dest)

    def frames(env_debug_dir):
        out = tmp_path / f"out-{bool(env_debug_dir)}"
        env = {"LIFETIME_SYMBOLIZE": "1"}
        if env_debug_dir:
            env["LIFETIME_DEBUG_DIR"] = f"{tmp_path / 'nowhere'}:{env_debug_dir}"
        run_sampled([str(app)], out, interval=4096, extra_env=env)
        prof = only_profile(out)
        stacks = [s for s in prof.stacks.values() if s.frames]
        assert stacks
        online = {f.function for s in stacks for f in s.frames}
        # Online: LIFETIME_DEBUG_DIR's directories, then /usr/lib/debug (always).
        cache = sym.ModuleCache(debug_dirs=[env_debug_dir, *sym.DEFAULT_DEBUG_DIRS]
                                if env_debug_dir else sym.DEFAULT_DEBUG_DIRS)
        for s in stacks:
            o = sym.Symbolizer(prof.mappings, cache=cache, inline_frames=False).symbolize_stack(
                list(s.addresses), leaf_is_return_address=True)
            assert [f.function for f in s.frames] == [f.function for f in o]
        return online

    named = frames(str(debug_dir))
    assert {"static_make", "static_loop"} <= named, named
    unnamed = frames("")
    assert not {"static_make", "static_loop"} & unnamed and "<app+?>" in unnamed, unnamed
