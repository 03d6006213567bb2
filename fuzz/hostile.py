"""Issue 20's hostile-input set, re-run through the real `lifetime` command.

    python -m fuzz.hostile --out out/hostile              # the whole set (~15 min)
    python -m fuzz.hostile --out out/hostile --quick      # a tenth of the mutants

Groups: mutated profiles (inspect; pprof on the ones inspect accepts; build-dataset
with a good file beside), heaptrack and TCMalloc recordings (import; build-dataset
with a good recording beside), simulator traces, CLI misuses, and hostile host
programs under `lifetime profile`.  Every case is one subprocess with a time limit and
a memory limit (RLIMIT_DATA), and gets one verdict:

    ok          exit 0 where success is right (a usable input, problems counted)
    error       a non-zero status documented for the command, with one clear line
                ("lifetime CMD: error: ..."), and no traceback
    traceback   a Python traceback, or a native crash (a signal)
    hang        over its time limit
    wrong-exit  exit 0 where an error was due, an undocumented status, or an error
                without its one line
    lost        a job over a bad and a good file lost the good file's samples
    wrong       a host program saw something the sampler changed (issue 20, 7 and 8)

Writes OUT/hostile.json (every case) and OUT/hostile.md (the table); exits 1 if any
case is traceback, hang, wrong-exit, lost or wrong.  Deterministic for a --seed."""

from __future__ import annotations

import argparse
import collections
import concurrent.futures
import dataclasses
import gzip
import json
import os
import pathlib
import random
import re
import resource
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
from typing import Callable

REPO = pathlib.Path(__file__).resolve().parent.parent
BIN = pathlib.Path(sys.executable).parent
LIFETIME = str(BIN / "lifetime")
FINDINGS = ("traceback", "hang", "wrong-exit", "lost", "wrong")
ONE_LINE = re.compile(r"^lifetime( [a-z-]+)?: error: \S", re.M)
DATA_LIMIT = 6 << 30  # per case: a reader that balloons fails here, visibly


@dataclasses.dataclass
class Case:
    group: str
    name: str
    argv: list[str]
    expect: str = "either"  # "ok", "error" or "either"
    timeout: float = 120
    check: Callable[["Result"], str | None] | None = None  # returns a finding or None
    env: dict | None = None
    shell: bool = False


@dataclasses.dataclass
class Result:
    case: Case
    status: int | None
    seconds: float
    peak_rss_mb: float
    stdout: str
    stderr: str
    verdict: str = ""
    detail: str = ""


def _limit() -> None:
    os.setsid()
    resource.setrlimit(resource.RLIMIT_DATA, (DATA_LIMIT, DATA_LIMIT))


def run(case: Case, work: pathlib.Path) -> Result:
    """Runs one case; peak RSS from wait4 (the command and the children it waited for)."""
    env = dict(os.environ, **(case.env or {}))
    with tempfile.TemporaryFile(dir=work) as out, tempfile.TemporaryFile(dir=work) as err:
        start = time.monotonic()
        p = subprocess.Popen(case.argv if not case.shell else ["sh", "-c", case.argv[0]],
                             stdin=subprocess.DEVNULL, stdout=out, stderr=err, env=env,
                             cwd=work, preexec_fn=_limit)
        box: dict = {}
        waiter = threading.Thread(target=lambda: box.update(r=os.wait4(p.pid, 0)))
        waiter.start()
        waiter.join(case.timeout)
        hung = waiter.is_alive()
        if hung:
            try:
                os.killpg(p.pid, 9)
            except ProcessLookupError:
                pass
            waiter.join()
        _, raw, usage = box["r"]
        p.returncode = 0  # reaped by wait4: keep Popen from waiting again
        seconds = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout = out.read().decode("utf-8", "replace")
        stderr = err.read().decode("utf-8", "replace")
    status = os.waitstatus_to_exitcode(raw)
    r = Result(case, None if hung else status, round(seconds, 2),
               round(usage.ru_maxrss / 1024, 1), stdout, stderr)
    r.verdict, r.detail = judge(r, hung)
    r.stdout, r.stderr = stdout[-4000:], stderr[-4000:]  # kept small: hundreds of cases
    return r


def judge(r: Result, hung: bool) -> tuple[str, str]:
    if hung:
        return "hang", f"over {r.case.timeout:.0f} s"
    if "Traceback (most recent call last)" in r.stderr:
        return "traceback", r.stderr.strip().splitlines()[-1][:300]
    if r.status is not None and r.status < 0:
        return "traceback", f"killed by signal {-r.status}"
    if r.status not in (0, 1, 2, 3):
        return "wrong-exit", f"undocumented status {r.status}: {_last(r.stderr)}"
    if r.status == 0 and r.case.expect == "error":
        return "wrong-exit", "exit 0 where an error was due"
    if r.status != 0 and r.case.expect == "ok":
        return "wrong-exit", f"status {r.status} on a usable input: {_last(r.stderr)}"
    if r.status != 0 and not ONE_LINE.search(r.stderr):
        return "wrong-exit", f"status {r.status} without a one-line error: {_last(r.stderr)}"
    if r.case.check:
        finding = r.case.check(r)
        if finding:
            return finding.split(":", 1)[0], finding
    return ("ok", "") if r.status == 0 else ("error", _last(r.stderr))


def _last(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else ""


# ---------------------------------------------------------------- base inputs

def _sh(argv: list[str], **kw) -> subprocess.CompletedProcess:
    return subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, **kw)


def base_inputs(work: pathlib.Path) -> dict:
    """Real recordings of real programs: sampled profiles of `ls` and `du` (the good file
    beside each mutant), heaptrack recordings of the same, a small dataset to simulate
    against, a full trace, and the committed TCMalloc profile."""
    b: dict = {}
    for prog, argv in (("ls", ["ls", "-lR", "/usr/lib/python3"]),
                       ("du", ["du", "-a", "/usr/lib/python3"])):
        d = work / "base" / prog
        _sh([LIFETIME, "profile", "--interval", "4096", "--out", str(d), "--", *argv])
        b[f"{prog}_profile"] = next(d.glob("*.ltprof"))
        h = work / "base" / f"ht-{prog}"
        h.mkdir(parents=True, exist_ok=True)
        _sh(["heaptrack", "--raw", "-o", str(h / f"heaptrack.{prog}.4242"), *argv],
            stderr=subprocess.DEVNULL)
        b[f"{prog}_heaptrack"] = next(h.glob("*.raw.zst"))
    full = work / "base" / "full"
    _sh([LIFETIME, "profile", "--full-trace", "--out", str(full), "--",
         "ls", "-lR", "/usr/lib/python3"])
    b["full_trace"] = next(full.glob("*.ltprof"))
    b["dataset"] = work / "base" / "dataset"
    _sh([LIFETIME, "build-dataset", "--profiles", str(b["ls_profile"]), "--out",
         str(b["dataset"])], stderr=subprocess.DEVNULL)
    sim = work / "base" / "sim"
    _sh([LIFETIME, "simulate", str(b["full_trace"]), "--train", str(b["dataset"]), "--out",
         str(sim)])
    b["trace"] = sim / "trace.lttrace"
    b["tcmalloc"] = REPO / "tests" / "data" / "tcmalloc_lifetimes.pb.gz"
    from profile_format import read_profile
    b["du_samples"] = len(read_profile(str(b["du_profile"])).samples)
    return b


# ---------------------------------------------------------------- profile mutants

def _chunks(path) -> list:
    from profile_format import container, profile_pb2
    return [profile_pb2.ProfileChunk.FromString(r) for r in container.iter_records(str(path))]


def _encode(chunks) -> bytes:
    import io
    from profile_format import container
    buf = io.BytesIO()
    for c in chunks:
        container.write_record(buf, c.SerializeToString(deterministic=True))
    return buf.getvalue()


def _field_mutants(path) -> dict[str, bytes]:
    """Well-framed profiles with values at and past what the format allows."""
    out = {}

    def mutant(name, fn):
        chunks = _chunks(path)
        fn(chunks)
        out[name] = _encode(chunks)

    s = lambda c: c[0].samples  # noqa: E731
    mutant("weight-1e30", lambda c: setattr(s(c)[0], "weight", 1e30))
    mutant("weight-inf", lambda c: setattr(s(c)[0], "weight", float("inf")))
    mutant("weight-nan", lambda c: setattr(s(c)[0], "weight", float("nan")))
    mutant("weight-negative", lambda c: setattr(s(c)[0], "weight", -1.0))
    mutant("size-2^63", lambda c: setattr(s(c)[0], "size", 1 << 63))
    mutant("size-2^64-1", lambda c: setattr(s(c)[0], "size", (1 << 64) - 1))
    mutant("all-sizes-huge", lambda c: [setattr(x, "size", (1 << 64) - 1) for x in s(c)])
    mutant("free-before-alloc", lambda c: setattr(s(c)[1], "free_monotonic_ns", 1))
    mutant("times-2^64-1", lambda c: [setattr(s(c)[2], f, (1 << 64) - 1) for f in
                                      ("alloc_monotonic_ns", "free_monotonic_ns")])
    mutant("age-2^64-1", lambda c: setattr(s(c)[3], "observed_age_ns", (1 << 64) - 1))
    mutant("program-8MB", lambda c: setattr(c[0].header, "program", "p" * (8 << 20)))
    mutant("program-controls", lambda c: setattr(c[0].header, "program",
                                                 "evil\x1b[2J\r\x00\u202e"))
    mutant("label-controls", lambda c: setattr(c[0].header, "version_label", "\x1b]0;x\x07"))
    mutant("argv-1M-args", lambda c: c[0].header.argv.extend(["a"] * 1_000_000))
    mutant("mapping-path-1MB", lambda c: setattr(c[0].mappings[0], "path", "/" + "m" * (1 << 20)))
    mutant("build-id-1MB", lambda c: setattr(c[0].mappings[0], "build_id", b"\xff" * (1 << 20)))
    mutant("mapping-inverted", lambda c: setattr(c[0].mappings[0], "limit", 0))
    mutant("addresses-2^64-1", lambda c: c[0].stacks[0].addresses.__setitem__(0, (1 << 64) - 1))
    mutant("stack-100k-frames", lambda c: c[0].stacks[0].addresses.extend(range(100_000)))
    mutant("stack-missing", lambda c: setattr(s(c)[0], "stack_id", 1 << 60))
    mutant("interval-2^64-1", lambda c: setattr(c[0].header, "sampling_interval_bytes",
                                                (1 << 64) - 1))
    mutant("pid-2^32-1", lambda c: setattr(c[0].header, "pid", (1 << 32) - 1))
    mutant("unknown-clock", lambda c: c[0].header.clocks.append(77))
    mutant("trailer-counts-huge", lambda c: setattr(c[-1].trailer, "total_allocations",
                                                    (1 << 64) - 1))
    mutant("schema-999", lambda c: setattr(c[0].header, "schema_version", 999))
    mutant("no-header", lambda c: c[0].ClearField("header"))
    mutant("chunk-twice", lambda c: c.insert(1, c[0]))
    return out


def _byte_mutants(path, rng: random.Random, n: int) -> dict[str, bytes]:
    import io

    from profile_format import container
    data = pathlib.Path(path).read_bytes()
    records = list(container.iter_records(str(path)))
    out = {}
    for i in range(n):
        kind = rng.choice(("flip", "flip", "truncate", "splice", "recrc"))
        b = bytearray(data)
        if kind == "flip":
            for _ in range(rng.randint(1, 8)):
                b[rng.randrange(len(b))] ^= 1 << rng.randrange(8)
        elif kind == "truncate":
            b = b[:rng.randrange(len(b))]
        elif kind == "splice":
            at = rng.randrange(len(b))
            b[at:at] = rng.randbytes(rng.randint(1, 64))
        else:  # payload bytes changed, checksums made right: the parser sees them
            buf = io.BytesIO()
            for payload in records:
                payload = bytearray(payload)
                for _ in range(rng.randint(1, 4)):
                    payload[rng.randrange(len(payload))] = rng.randrange(256)
                container.write_record(buf, bytes(payload))
            b = bytearray(buf.getvalue())
        out[f"{kind}-{i:03d}"] = bytes(b)
    return out


def profile_cases(b: dict, work: pathlib.Path, rng: random.Random, scale: float) -> list[Case]:
    d = work / "profiles"
    d.mkdir()
    mutants = {**_field_mutants(b["ls_profile"]),
               **_byte_mutants(b["ls_profile"], rng, int(500 * scale) or 5)}
    cases = []
    for name, blob in mutants.items():
        p = d / f"{name}.ltprof"
        p.write_bytes(blob)
        cases.append(Case("profile: inspect", name, [LIFETIME, "inspect", str(p)]))
    chosen = [n for n in mutants if not n[-3:].isdigit()]
    chosen += rng.sample([n for n in mutants if n[-3:].isdigit()], k=int(40 * scale) or 2)
    for name in chosen:
        p = d / f"{name}.ltprof"
        cases.append(Case("profile: pprof", name, [LIFETIME, "pprof", str(p), "-o",
                                                   str(work / "pprof" / f"{name}.pb.gz")]))
    du = b["du_samples"]
    for name in rng.sample(chosen, k=min(len(chosen), int(30 * scale) or 3)):
        out = work / "datasets" / name
        cases.append(Case("profile: build-dataset beside a good file", name,
                          [LIFETIME, "build-dataset", "--profiles", str(d / f"{name}.ltprof"),
                           str(b["du_profile"]), "--out", str(out)],
                          expect="ok", check=_kept("du", du, out), timeout=300))
    return cases


def _kept(program: str, samples: int, out: pathlib.Path) -> Callable[[Result], str | None]:
    """The dataset over (bad, good) keeps every sample of the good file."""
    def check(r: Result) -> str | None:
        try:
            manifest = json.loads((out / "manifest.json").read_text())
        except (OSError, ValueError) as e:
            return f"lost: no manifest ({e})"
        got = sum(v["samples"] for k, v in manifest["files"]["programs"].items()
                  if k.split(" ")[0] == program)
        return None if got == samples else f"lost: {program} kept {got} of {samples} samples"
    return check


# ---------------------------------------------------------------- importer mutants

_NUMBERS = re.compile(rb"\b[0-9a-f]+\b")
_HOSTILE_NUMBERS = (b"10000000000000000", b"ffffffffffffffff", b"1" * 40, b"-1", b"zz",
                    b"", b"0")


def _heaptrack_mutants(path, rng: random.Random, n: int) -> dict[str, bytes]:
    import zstandard
    with open(path, "rb") as f:
        text = zstandard.ZstdDecompressor().stream_reader(f).read()
    lines = text.split(b"\n")
    z = lambda t: zstandard.ZstdCompressor(level=1).compress(t)  # noqa: E731
    out = {"allocation-2^64": z(text + b"+ 10000000000000000 1 aa\n"),
           "trace-index-2^64-1": z(text + b"c ffffffffffffffff\n"),
           "cut-zstd": z(text)[:len(z(text)) // 2],
           "not-zstd": rng.randbytes(4096)}
    for i in range(n):
        ls = list(lines)
        for _ in range(rng.randint(1, 4)):
            j = rng.randrange(len(ls))
            op = rng.choice(("number", "number", "number", "drop", "dup", "junk"))
            if op == "number":
                nums = list(_NUMBERS.finditer(ls[j]))
                if nums:
                    m = rng.choice(nums)
                    ls[j] = ls[j][:m.start()] + rng.choice(_HOSTILE_NUMBERS) + ls[j][m.end():]
            elif op == "drop":
                del ls[j]
            elif op == "dup":
                ls.insert(j, ls[j])
            else:
                ls.insert(j, rng.randbytes(rng.randint(1, 40)).replace(b"\n", b" "))
        out[f"lines-{i:03d}"] = z(b"\n".join(ls))
    return out


def _tcmalloc_mutants(path, rng: random.Random, n: int) -> dict[str, bytes]:
    raw = gzip.decompress(pathlib.Path(path).read_bytes())
    out = {"not-gzip": raw[:1000], "cut-gzip": gzip.compress(raw, mtime=0)[:300]}
    for i in range(n):
        b = bytearray(raw)
        for _ in range(rng.randint(1, 6)):
            b[rng.randrange(len(b))] = rng.choice((0xFF, 0x80, 0x00, rng.randrange(256)))
        out[f"bytes-{i:03d}"] = gzip.compress(bytes(b), mtime=0)
    return out


def importer_cases(b: dict, work: pathlib.Path, rng: random.Random, scale: float) -> list[Case]:
    cases = []
    d = work / "imports"
    d.mkdir()
    ht = _heaptrack_mutants(b["ls_heaptrack"], rng, int(200 * scale) or 5)
    for name, blob in ht.items():
        p = d / f"heaptrack.{name}.raw.zst"
        p.write_bytes(blob)
        cases.append(Case("heaptrack: import", name, [LIFETIME, "import", "--format", "heaptrack",
                                                      str(p), "-o", str(work / "imported" / name)]))
    good = work / "imported-good"
    _sh([LIFETIME, "import", "--format", "heaptrack", str(b["du_heaptrack"]), "-o", str(good)])
    from profile_format import read_profile
    du = sum(len(read_profile(str(p)).samples) for p in good.glob("*.ltprof"))
    pick = ["allocation-2^64", "trace-index-2^64-1", "cut-zstd", "not-zstd"]
    pick += rng.sample([n for n in ht if n.startswith("lines-")], k=int(12 * scale) or 2)
    for name in pick:
        out = work / "datasets" / f"heaptrack-{name}"
        cases.append(Case("heaptrack: build-dataset beside a good recording", name,
                          [LIFETIME, "build-dataset", "--format", "heaptrack", "--profiles",
                           str(d / f"heaptrack.{name}.raw.zst"), str(b["du_heaptrack"]),
                           "--out", str(out)],
                          expect="ok", check=_kept("du", du, out), timeout=300))
    for name, blob in _tcmalloc_mutants(b["tcmalloc"], rng, int(60 * scale) or 3).items():
        p = d / f"tcmalloc.{name}.pb.gz"
        p.write_bytes(blob)
        cases.append(Case("tcmalloc: import", name, [LIFETIME, "import", "--format", "tcmalloc",
                                                     str(p), "-o", str(work / "imported" / name)]))
    return cases


# ---------------------------------------------------------------- traces

def trace_cases(b: dict, work: pathlib.Path, rng: random.Random, scale: float) -> list[Case]:
    """Mutants of a real trace (the full trace of `ls`, converted by simulate): sizes at
    and past what the format allows, reserved set, bytes flipped, cut."""
    from simulator import trace as tr
    d = work / "traces"
    d.mkdir()
    real = b["trace"].read_bytes()
    with open(b["trace"], "rb") as f:
        first = tr.read_header(f, str(b["trace"])).header_bytes  # record 0's offset
    stacks = json.loads(b["trace"].with_name("trace.stacks.json").read_text())

    def write(name: str, blob: bytes) -> pathlib.Path:
        p = d / f"{name}.lttrace"
        p.write_bytes(blob)
        (d / f"{name}.stacks.json").write_text(json.dumps(dict(stacks, trace=p.name)))
        return p

    def sized(size: int, record: int = 0) -> bytes:
        blob = bytearray(real)
        struct.pack_into("<Q", blob, first + tr.RECORD.size * record + 16, size)
        return bytes(blob)

    traces = {"valid": (write("valid", real), "ok"),
              "size-8TiB": (write("size-8TiB", sized(8 << 40)), "either"),
              "size-16TiB-1": (write("size-16TiB-1", sized((16 << 40) - 1)), "either"),
              "size-1TiB": (write("size-1TiB", sized(1 << 40, 5)), "either"),
              "size-2^64-1": (write("size-2^64-1", sized((1 << 64) - 1)), "error")}
    blob = bytearray(real)
    struct.pack_into("<Q", blob, 40, 7)
    traces["reserved-nonzero"] = (write("reserved-nonzero", bytes(blob)), "error")
    for i in range(int(40 * scale) or 3):
        m = bytearray(real)
        if rng.random() < 0.3:
            m = m[:rng.randrange(len(m))]
        else:
            for _ in range(rng.randint(1, 6)):
                m[rng.randrange(len(m))] = rng.choice((0xFF, 0x80, 0, rng.randrange(256)))
        traces[f"bytes-{i:03d}"] = (write(f"bytes-{i:03d}", bytes(m)), "either")
    return [Case("trace: simulate", n, [LIFETIME, "simulate", str(p), "--train", str(b["dataset"]),
                                        "--out", str(work / "sim" / n)], expect=e, timeout=120)
            for n, (p, e) in traces.items()]


# ---------------------------------------------------------------- CLI misuses

def cli_cases(b: dict, work: pathlib.Path) -> list[Case]:
    """Options and paths a user can get wrong; every one must end in a one-line error."""
    d = work / "cli"
    d.mkdir()
    fifo = d / "fifo"
    os.mkfifo(fifo)
    for name in ("x.ltprof", "x.lttrace", "vocab.txt"):
        os.mkfifo(d / name)
    fifo_ds = d / "fifo-dataset"
    shutil.copytree(b["dataset"], fifo_ds)
    (fifo_ds / "manifest.json").unlink()
    os.mkfifo(fifo_ds / "manifest.json")
    a_file = d / "a-file"
    a_file.write_text("x")
    ro = "/proc/self/cannot-write"
    MISSING = str(d / "missing")  # never a system path: a command that wrongly creates it
    # would leave it behind for the next case (/nonexistent is nobody's home)
    P, DS, OUT = str(b["ls_profile"]), str(b["dataset"]), str(d / "out")
    misuses = {
        "inspect": [["--samples", "-1", P], ["--samples", "x", P], ["--samples", "1" * 30, P],
                    [str(fifo)], [str(d)], [MISSING], ["/dev/zero"]],
        "build-dataset": [
            *[["--profiles", P, "--out", OUT, *o] for o in (
                ["--max-frames", "1000000000"], ["--max-frames", "0"], ["--max-frames", "-3"],
                ["--boundaries", "nan,inf"], ["--boundaries", "3,2"], ["--boundaries", "1,1"],
                ["--boundaries", "-1"], ["--boundaries", "abc"], ["--boundaries", "1e400"],
                ["--boundaries", ","], ["--vocab", str(d / "vocab.txt")], ["--vocab", str(d)],
                ["--vocab", MISSING], ["--like", str(fifo_ds)], ["--like", str(d)],
                ["--vocab-size", "0"], ["--vocab-size", "1" * 20], ["--eval-percent", "101"],
                ["--shards", "0"], ["--shards", "1000000000"], ["--format", "bogus"],
                ["--clock", "bogus"], ["--debug-dir", MISSING], ["--sysroot", str(a_file)],
                ["--version-label", "a", "--version-label", "b"])],
            ["--profiles", str(fifo), "--out", OUT], ["--profiles", MISSING, "--out", OUT],
            ["--profiles", P, "--out", str(a_file)], ["--profiles", P, "--out", ro]],
        "characterize": [["--profiles", str(fifo), "--out", OUT],
                         ["--profiles", P, "--out", str(a_file)]],
        "train": [["--dataset", DS, "--out", OUT, *o] for o in (
            ["--learning-rate", "nan"], ["--learning-rate", "inf"], ["--learning-rate", "-1"],
            ["--learning-rate", "0"], ["--epochs", "0"], ["--epochs", "-1"],
            ["--batch-size", "0"], ["--batch-size", "1" * 20], ["--lstm-units", "0"],
            ["--embedding-dim", "1000000000"], ["--unk-dropout", "1.5"],
            ["--weight-power", "nan"], ["--patience", "-1"], ["--tokens-per-frame", "0"])] + [
            ["--dataset", str(fifo_ds), "--out", OUT], ["--dataset", MISSING, "--out", OUT],
            ["--dataset", DS, "--out", str(a_file)]],
        "evaluate": [["--model", MISSING, "--dataset", DS],
                     ["--model", str(d), "--dataset", DS], ["--model", str(fifo_ds), "--dataset", DS]],
        "report": [["--model", MISSING, "--train", DS, "--test", DS, "--out", OUT, *o]
                   for o in (["--fractions", "0,2"], ["--fractions", "nan"],
                             ["--fractions", "-0.1"], ["--fractions", "abc"], [])],
        "evaluate-online": [[P, "--model", MISSING], [P, "--model", str(d)],
                            [P, "--model", str(d), "--boundaries", "nan"],
                            [P, "--model", str(d), "--json", ro + "/x.json"]],
        "export": [[MISSING, "--out", OUT], [str(d), "--out", OUT],
                   [DS, "--out", str(a_file)]],
        "simulate": [*[[P, "--train", DS, "--out", OUT, *o] for o in (
            ["--deadline-k", "-1"], ["--deadline-k", "0"], ["--deadline-k", "1" * 25],
            ["--series-interval-ms", "0"], ["--series-interval-ms", "-5"],
            ["--run-records", "-1"], ["--model-revalidate-every", "-1"],
            ["--model", MISSING], ["--model", str(d)])],
            [str(d / "x.lttrace"), "--train", DS, "--out", OUT],
            [str(d / "x.ltprof"), "--train", DS, "--out", OUT],
            [P, "--train", str(fifo_ds), "--out", OUT], [P, "--train", MISSING, "--out", OUT],
            [P, "--train", DS, "--out", str(a_file)], [P, "--out", OUT]],
        "fragmentation": [*[[P, "--out", OUT, *o] for o in (
            ["--at", "nan"], ["--at", "-1"], ["--rerun", "65"], ["--rerun", "-1"], ["--top", "0"],
            ["--steady-samples", "0"], ["--policy", "bogus"], ["--predictor", "bogus:1"],
            ["--model", MISSING], ["--model", str(d)], ["--train", MISSING])],
            [MISSING, "--out", OUT], [str(d), "--out", OUT], [str(fifo), "--out", OUT],
            [P, "--out", str(a_file)], [P, "--out", ro + "/x"]],
        "pprof": [[P, "-o", str(d)], [P, "-o", ro + "/x.pb.gz"], [P, "-o", OUT, "--view", "bogus"],
                  [str(fifo), "-o", str(d / "x.pb.gz")], [MISSING, "-o", str(d / "y.pb.gz")]],
        "import": [["--format", "bogus", P, "-o", OUT], [str(fifo), "-o", OUT],
                   ["--format", "heaptrack", str(fifo), "-o", OUT],
                   [str(b["ls_heaptrack"]), "-o", str(a_file)], [MISSING, "-o", OUT]],
        "profile": [["--out", ro, "--", "true"], ["--out", str(a_file), "--", "true"],
                    ["--out", str(fifo), "--", "true"],
                    ["--interval", "99999999999999999999999", "--out", OUT, "--", "true"],
                    ["--interval", "0", "--", "true"], ["--interval", "-5", "--", "true"],
                    ["--full-trace-capacity", "0", "--full-trace", "--", "true"],
                    ["--out", OUT], ["--out", OUT, "--", MISSING],
                    ["--out", OUT, "--", str(d)], ["--model", MISSING, "--", "true"]],
    }
    cases = []
    for cmd, argvs in misuses.items():
        for argv in argvs:
            cases.append(Case("cli misuse", f"{cmd} {' '.join(x[-30:] for x in argv)}",
                              [LIFETIME, cmd, *argv], expect="error", timeout=60,
                              check=lambda r: f"wrong: {MISSING} created" if os.path.lexists(
                                  MISSING) else None))
    cases.append(Case("cli misuse", "no subcommand", [LIFETIME], expect="error"))
    cases.append(Case("cli misuse", "unknown subcommand", [LIFETIME, "bogus"], expect="error"))
    return cases


# ---------------------------------------------------------------- hostile hosts

_CLOSED_STDOUT = r"""
import errno, os, threading
res = []
def writer():
    for i in range(200):
        blob = [bytearray(4096) for _ in range(64)]  # allocations: samples and flushes
        try:
            os.write(1, b"host text %d\n" % i)
            res.append("ok")
        except OSError as e:
            res.append(errno.errorcode[e.errno])
t = threading.Thread(target=writer); t.start(); t.join()
os.write(2, ("writes " + " ".join(sorted(set(res))) + " %d ok\n" % res.count("ok")).encode())
"""

_FORKS = r"""
import os
pids = []
for i in range(200):
    pid = os.fork()
    if pid == 0:
        keep = [bytearray(256 + (j % 7) * 64) for j in range(400)]
        os._exit(0)
    pids.append(pid)
for p in pids:
    os.waitpid(p, 0)
"""


def host_cases(work: pathlib.Path) -> list[Case]:
    d = work / "hosts"
    d.mkdir()
    (d / "closed_stdout.py").write_text(_CLOSED_STDOUT)
    (d / "forks.py").write_text(_FORKS)
    env = {"PYTHONMALLOC": "malloc", "LIFETIME_FLUSH_MS": "1"}
    closed_out = d / "closed-out"

    def closed_check(r: Result) -> str | None:
        line = [ln for ln in r.stderr.splitlines() if ln.startswith("writes ")]
        if not line or line[0] != "writes EBADF 0 ok":
            return f"wrong: the host's writes to its closed stdout: {line}"
        from profile_format import read_profile
        for p in closed_out.glob("*.ltprof"):
            try:
                read_profile(str(p))
            except Exception as e:  # noqa: BLE001 (any problem is the finding)
                return f"wrong: {p.name} reads as corrupt: {e}"
        return None

    forks_out = d / "forks-out"

    def forks_check(r: Result) -> str | None:
        from profile_format import read_profile
        counts, seen = [], []
        for p in forks_out.glob("*.ltprof"):
            prof = read_profile(str(p))
            if prof.header.forked_from_pid and prof.header.program.startswith("python"):
                counts.append(len(prof.samples))
                seen.append(frozenset((s.size, s.alloc_allocated_bytes) for s in prof.samples))
        if len(counts) != 200:
            return f"wrong: {len(counts)} child profiles of 200"
        if len(set(counts)) == 1 or len(set(seen)) < 150:
            return (f"wrong: children sample alike ({len(set(counts))} distinct counts, "
                    f"{len(set(seen))} distinct sample sets)")
        return None

    py = shutil.which("python3")
    return [
        Case("hostile host", "closed stdout, a thread writes to fd 1",
             [f"exec >&-; exec {LIFETIME} profile --interval 1024 --out {closed_out} -- "
              f"{py} {d / 'closed_stdout.py'}"], expect="ok", shell=True, env=env,
             check=closed_check),
        Case("hostile host", "200 forked children",
             [LIFETIME, "profile", "--interval", "16384", "--out", str(forks_out), "--", py,
              str(d / "forks.py")], expect="ok", env=env, check=forks_check),
    ]


# ---------------------------------------------------------------- main

def table(results: list[Result]) -> str:
    by = collections.OrderedDict()
    for r in results:
        by.setdefault(r.case.group, collections.Counter())[r.verdict] += 1
    cols = ["ok", "error", *FINDINGS]
    rows = ["| group | runs | " + " | ".join(cols) + " | max s | max RSS MB |",
            "|---|---|" + "---|" * len(cols) + "---|---|"]
    for group, counts in by.items():
        rs = [r for r in results if r.case.group == group]
        rows.append(f"| {group} | {len(rs)} | " + " | ".join(str(counts[c]) for c in cols) +
                    f" | {max(r.seconds for r in rs):.1f} | {max(r.peak_rss_mb for r in rs):.0f} |")
    total = collections.Counter(r.verdict for r in results)
    rows.append(f"| **all** | {len(results)} | " + " | ".join(str(total[c]) for c in cols) +
                f" | {max(r.seconds for r in results):.1f} | "
                f"{max(r.peak_rss_mb for r in results):.0f} |")
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", default="out/hostile")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a tenth of the mutants")
    parser.add_argument("--groups", nargs="+",
                        choices=("profiles", "importers", "traces", "cli", "hosts"),
                        default=["profiles", "importers", "traces", "cli", "hosts"])
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    out = pathlib.Path(args.out).resolve()
    shutil.rmtree(out, ignore_errors=True)
    work = out / "work"
    work.mkdir(parents=True)
    rng = random.Random(args.seed)
    scale = 0.1 if args.quick else 1.0
    print("recording the base inputs (sampler, heaptrack, a dataset) ...", flush=True)
    b = base_inputs(work)
    cases = []
    make = {"profiles": lambda: profile_cases(b, work, rng, scale),
            "importers": lambda: importer_cases(b, work, rng, scale),
            "traces": lambda: trace_cases(b, work, rng, scale),
            "cli": lambda: cli_cases(b, work), "hosts": lambda: host_cases(work)}
    for g in args.groups:
        cases += make[g]()
    print(f"{len(cases)} cases, {args.jobs} at a time", flush=True)
    results: list[Result] = []
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for i, r in enumerate(pool.map(lambda c: run(c, work), cases), 1):
            results.append(r)
            if r.verdict in FINDINGS:
                print(f"  {r.verdict}: {r.case.group} / {r.case.name}: {r.detail}", flush=True)
            if i % 50 == 0 or i == len(cases):
                print(f"  {i}/{len(cases)} done, {time.monotonic() - start:.0f} s", flush=True)
    md = table(results)
    (out / "hostile.md").write_text(md + "\n")
    (out / "hostile.json").write_text(json.dumps(
        [{"group": r.case.group, "name": r.case.name, "argv": r.case.argv, "status": r.status,
          "verdict": r.verdict, "detail": r.detail, "seconds": r.seconds,
          "peak_rss_mb": r.peak_rss_mb} for r in results], indent=1) + "\n")
    print(md)
    print(f"wrote {out / 'hostile.md'} and hostile.json ({time.monotonic() - start:.0f} s)")
    return int(any(r.verdict in FINDINGS for r in results))


if __name__ == "__main__":
    sys.exit(main())
