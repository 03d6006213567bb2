"""PostgreSQL under the sampler, driven by pgbench over loopback TCP.

Versions (PostgreSQL 17 and newer are reserved and refused):

  15.5   pgserver 0.0.5 wheel (cp311)   pginstall/bin: postgres, initdb, pgbench (.symtab)
  16.2   pgserver 0.1.4 wheel (cp311)

PostgreSQL refuses to run as root: when we are root, initdb and the server run as an
unprivileged user ($LIFETIME_SERVER_USER, default `nobody`) through subprocess's
user/group switch (no extra process image to profile); its data directory, unix
socket and the sampler's staging directory live in a temporary directory it owns, and
the finished profiles are moved to the requested directory. If the cache is not
readable for that user (it is under /root), the unpacked wheel is copied once to a
stable world-readable place (common.stage_root(), /var/tmp/lifetime-models/servers)
and run from there, so the paths the profiles name stay valid for offline
symbolization.

The postmaster forks a backend per connection and its auxiliary processes: the
sampler writes one profile per process (``postgres.<pid>.<start>.ltprof``).

Load (``load_plan``, a pure function of the seed, the same for every version):
``pgbench -i`` (scale from the seed), then rounds of ~3 s phases in a seed-drawn
order: built-in TPC-B-like, select-only (prepared), simple-update, a custom script
with temporary tables, string aggregation and sorts (extended protocol), an analytic
one (string_agg, jsonb_agg, window functions, md5 over text; prepared), a write/delete
script that feeds autovacuum, a weighted mix, and a reconnect-per-transaction phase
(-C, rate limited) that makes many short backends. Every pgbench run gets
--random-seed derived from the seed. The server then gets a fast shutdown (SIGINT).

    python3 -m benchmarks.servers.postgres fetch 15.5 16.2
    python3 -m benchmarks.servers.postgres plan --seed 1
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time


from benchmarks.servers import common  # noqa: E402
from benchmarks.servers.common import ServerSetupError, Wheel  # noqa: E402

RESERVED_FROM = (17,)
WHEELS = {
    "15.5": Wheel("pgserver==0.0.5", "3.11", "cp311", "manylinux_2_17_x86_64"),
    "16.2": Wheel("pgserver==0.1.4", "3.11", "cp311", "manylinux_2_17_x86_64"),
}
VERSIONS = sorted(WHEELS, key=common.version_tuple)


def check_version(version: str) -> str:
    common.refuse_reserved("PostgreSQL", version, RESERVED_FROM)
    if version not in WHEELS:
        raise ValueError(f"PostgreSQL {version}: no known build "
                         f"(supported: {', '.join(VERSIONS)})")
    return version


@dataclasses.dataclass(frozen=True)
class PostgresBuild:
    version: str
    root: pathlib.Path        # the unpacked wheel (bin/ needs ../../../pgserver.libs)
    bin: pathlib.Path         # .../pgserver/pginstall/bin

    def tool(self, name: str) -> str:
        return str(self.bin / name)

    def to_json(self) -> dict:
        return {"version": self.version, "root": str(self.root), "bin": str(self.bin)}


def _cache_dir(version: str) -> pathlib.Path:
    return common.cache_root() / "postgres" / f"{version}-pgserver"


def _build_at(version: str, root: pathlib.Path) -> PostgresBuild | None:
    found = sorted(root.glob("**/pginstall/bin/postgres"))
    if not found:
        return None
    return PostgresBuild(version, root, found[0].parent)


def cached(version: str) -> PostgresBuild | None:
    """The unpacked cached wheel of VERSION, or None (never fetches)."""
    check_version(version)
    d = _cache_dir(version)
    if not (d / ".unpacked").is_file():
        return None
    return _build_at(version, d)


def postgres_version(build: PostgresBuild) -> str:
    out = subprocess.run([build.tool("postgres"), "--version"], capture_output=True,
                         text=True).stdout
    m = re.search(r"\(PostgreSQL\)\s+(\S+)", out)
    if not m:
        raise ServerSetupError(f"{build.tool('postgres')}: unexpected --version output {out!r}")
    return m.group(1)


def ensure(version: str) -> PostgresBuild:
    """Fetches and unpacks VERSION's wheel into the cache if needed."""
    check_version(version)
    build = cached(version)
    if build is None:
        wheel = common.fetch_wheel(WHEELS[version])
        root = common.unpack_wheel(wheel, _cache_dir(version))
        build = _build_at(version, root)
        if build is None:
            raise ServerSetupError(f"{wheel.name}: no pginstall/bin/postgres inside")
    got = postgres_version(build)
    if got != version:
        raise ServerSetupError(f"{build.bin}: postgres says {got}, expected {version}")
    return build


def runnable_by(build: PostgresBuild, user: common.RunUser) -> PostgresBuild:
    """BUILD itself if USER can execute its postgres, else a staged world-readable copy."""
    if common.can_access(user, build.tool("postgres"), "x"):
        return build
    staged = common.stage_tree(build.root, f"postgres/{build.version}-pgserver")
    copy = _build_at(build.version, staged)
    if copy is None or not common.can_access(user, copy.tool("postgres"), "x"):
        raise ServerSetupError(f"{staged}: staged PostgreSQL is not executable by "
                               f"{user.name}")
    return copy


# --- the load plan ----------------------------------------------------------------

SCRIPTS = {
    # temporary tables, string aggregation, sorts (temp tables persist per backend)
    "temp_agg.sql": """\
\\set n random(20, 400)
\\set aid random(1, 100000 * :scale)
BEGIN;
CREATE TEMP TABLE IF NOT EXISTS scratch (id int, s text, v numeric) ON COMMIT DELETE ROWS;
INSERT INTO scratch SELECT g, md5((g + :aid)::text), (g * 7919) % 1000 FROM generate_series(1, :n) g;
SELECT string_agg(s, ',' ORDER BY s DESC) FROM scratch WHERE v > 100;
SELECT v, count(*), array_agg(id ORDER BY id) FROM scratch GROUP BY v ORDER BY count(*) DESC, v LIMIT 10;
SELECT aid, abalance FROM pgbench_accounts WHERE aid BETWEEN :aid AND :aid + 200 ORDER BY abalance DESC, aid LIMIT 20;
END;
""",
    # analytics: string_agg, jsonb, window functions, text functions
    "analytics.sql": """\
\\set lo random(1, 100000 * :scale - 1000)
SELECT bid, count(*), sum(abalance), string_agg(aid::text, ',' ORDER BY aid) FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 999 GROUP BY bid;
SELECT jsonb_agg(jsonb_build_object('a', aid, 'b', abalance, 'f', trim(filler))) FROM (SELECT aid, abalance, filler FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 60 ORDER BY abalance, aid) x;
SELECT md5(string_agg(filler, '' ORDER BY aid)) FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 300;
SELECT count(*) FROM (SELECT aid, rank() OVER (PARTITION BY bid ORDER BY abalance DESC) r FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 400) w WHERE r <= 5;
SELECT upper(substr(filler, 1, 10)) || lpad(aid::text, 12, '0') AS k FROM pgbench_accounts WHERE aid BETWEEN :lo AND :lo + 100 ORDER BY k DESC LIMIT 5;
""",
    # writes and deletes on an extra table: dead tuples for autovacuum, index churn
    "churn.sql": """\
\\set k random(1, 20000)
\\set d random(1, 20000)
INSERT INTO churn (k, payload) VALUES (:k, repeat(md5(:k::text), 1 + :k % 8));
UPDATE churn SET payload = payload || 'x' WHERE k = :d;
DELETE FROM churn WHERE k = :d - 17;
SELECT k, length(payload) FROM churn WHERE k BETWEEN :k AND :k + 50 ORDER BY length(payload) DESC LIMIT 5;
""",
}

SETUP_SQL = ("CREATE TABLE IF NOT EXISTS churn (id bigserial PRIMARY KEY, k int NOT NULL, "
             "payload text, at timestamptz DEFAULT now()); "
             "CREATE INDEX IF NOT EXISTS churn_k ON churn (k);")


@dataclasses.dataclass(frozen=True)
class Phase:
    name: str
    args: tuple[str, ...]    # pgbench arguments, without connection, -T and --random-seed

    def describe(self) -> str:
        return f"{self.name}: " + " ".join(self.args)


def phase_catalogue(seed: int) -> list[Phase]:
    rng = random.Random(f"postgres-load-{seed}")
    c = lambda *xs: str(rng.choice(xs))  # noqa: E731
    return [
        Phase("tpcb", ("-b", "tpcb-like", "-c", c(4, 6), "-j", "2", "-M", "simple")),
        Phase("select-only", ("-b", "select-only", "-c", c(6, 8), "-j", "2", "-M", "prepared", "-n")),
        Phase("simple-update", ("-b", "simple-update", "-c", c(3, 4), "-j", "2", "-M", "extended", "-n")),
        Phase("temp-agg", ("-f", "temp_agg.sql", "-c", c(2, 3), "-j", "2", "-M", "extended", "-n")),
        Phase("analytics", ("-f", "analytics.sql", "-c", c(2, 3), "-j", "2", "-M", "prepared", "-n")),
        Phase("churn", ("-f", "churn.sql", "-c", c(3, 4), "-j", "2", "-M", "prepared", "-n")),
        Phase("mixed", ("-b", "tpcb-like@4", "-b", "select-only@4", "-f", "analytics.sql@1",
                        "-f", "churn.sql@2", "-c", c(4, 5), "-j", "2", "-M", "prepared", "-n")),
        Phase("reconnect", ("-C", "-b", "select-only", "-c", "2", "-j", "2", "-R", c(15, 20),
                            "-M", "simple", "-n")),
    ]


def load_plan(seed: int, seconds: float) -> dict:
    """{'scale', 'init_seconds_budget', 'phases': [(phase, seconds)]}: pgbench -i at the
    seed's scale, then rounds of the catalogue in seed-drawn orders, integer slices."""
    rng = random.Random(f"postgres-order-{seed}")
    scale = rng.choice([2, 3])
    phases = phase_catalogue(seed)
    budget = max(len(phases) * 2, int(seconds) - 8)  # ~8 s for initialization
    slice_s = 3 if budget >= 3 * len(phases) else 2
    rounds = max(1, budget // (slice_s * len(phases)))
    plan = []
    for _ in range(rounds):
        order = phases[:]
        rng.shuffle(order)
        plan += [(p, slice_s) for p in order]
    return {"scale": scale, "phases": plan}


# --- running --------------------------------------------------------------------

def _client_env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LIFETIME_", "PG"))}
    env.pop("LD_PRELOAD", None)
    env["LC_ALL"] = "C"
    return env


def _ready(build: PostgresBuild, port: int) -> bool:
    proc = subprocess.run([build.tool("pg_isready"), "-q", "-h", "127.0.0.1", "-p", str(port),
                           "-U", "postgres", "-d", "postgres"], env=_client_env())
    return proc.returncode == 0


def _psql(build: PostgresBuild, port: int, sql: str) -> str:
    proc = subprocess.run([build.tool("psql"), "-X", "-q", "-At", "-v", "ON_ERROR_STOP=1",
                           "-h", "127.0.0.1", "-p", str(port), "-U", "postgres", "-d",
                           "postgres", "-c", sql], capture_output=True, text=True,
                          env=_client_env())
    if proc.returncode != 0:
        raise ServerSetupError(f"psql failed: {proc.stderr.strip()}")
    return proc.stdout


def _pgbench(build: PostgresBuild, port: int, args: list[str], cwd: str,
             timeout: float) -> tuple[int, str]:
    cmd = [build.tool("pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
           *args, "postgres"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, env=_client_env(),
                              timeout=timeout)
    except subprocess.TimeoutExpired:
        return 124, "timeout"
    return proc.returncode, proc.stdout + proc.stderr


def initdb(build, data: str, env: dict, cwd: str, user, version: str) -> None:
    """A new cluster in DATA, owned by USER (postgres refuses root); one error naming
    the version and initdb's output when it fails."""
    init = subprocess.run([build.tool("initdb"), "-D", data, "-U", "postgres",
                           "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync"],
                          capture_output=True, text=True, env=env, cwd=cwd,
                          **user.popen_kwargs())
    if init.returncode != 0:
        raise ServerSetupError(f"initdb ({version}) failed:\n{init.stdout[-1500:]}"
                               f"{init.stderr[-1500:]}")


def profile(version: str, out_dir: str, seconds: float = 60, interval: int | None = None,
            seed: int = 1, extra_env: dict | None = None) -> dict:
    """initdb (not profiled), then the postmaster and every process it forks under the
    sampler, pgbench -i and the load plan of SEED for about SECONDS, fast shutdown;
    the profiles end up in OUT_DIR. Returns a run record."""
    from profiler import launch

    user = common.run_user()
    build = runnable_by(ensure(version), user)
    plan = load_plan(seed, seconds)
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"lt-pg-{version}-")
    data, staging, log = (os.path.join(tmp, "data"), os.path.join(tmp, "profiles"),
                          os.path.join(tmp, "postgres.log"))
    os.mkdir(staging)
    for name, text in SCRIPTS.items():
        pathlib.Path(tmp, name).write_text(text)
    if os.geteuid() == 0 and user.uid != 0:
        for p in (tmp, staging):
            os.chown(p, user.uid, user.gid)
    os.chmod(tmp, 0o755)  # pgbench (the caller) reads the scripts
    server_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": tmp}
    t0 = time.monotonic()
    proc = None
    record: dict = {"family": "postgres", "version": version, "seed": seed, "seconds": seconds,
                    "server": build.to_json(), "user": user.name, "scale": plan["scale"]}
    try:
        initdb(build, data, server_env, tmp, user, version)
        t_init = time.monotonic()
        port = common.free_port()
        env = launch.profiled_env(staging, interval, f"postgres-{version}",
                                  {"LIFETIME_SEED": str(seed), **(extra_env or {})},
                                  base=server_env)
        env["LD_PRELOAD"] = env["LD_PRELOAD"].replace(launch.sampler_library_path(),
                                                      common.sampler_for(user))
        server_cmd = [build.tool("postgres"), "-D", data, "-p", str(port), "-k", tmp,
                      "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
                      "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
                      "-c", "max_connections=40", "-c", "shared_buffers=32MB",
                      "-c", "autovacuum_naptime=5s", "-c", "log_min_messages=warning",
                      "-c", "logging_collector=off"]
        with open(log, "w") as logf:
            if os.geteuid() == 0:
                os.chown(log, user.uid, user.gid)
            proc = subprocess.Popen(server_cmd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=subprocess.STDOUT, cwd=tmp,
                                    **user.popen_kwargs())
        common.wait_until(lambda: _ready(build, port), 60, f"postgres {version}", proc, log)
        t_up = time.monotonic()
        code, out = _pgbench(build, port, ["-i", "-s", str(plan["scale"]), "-q"], tmp, 300)
        if code != 0:
            raise ServerSetupError(f"pgbench -i failed ({code}):\n{out[-2000:]}")
        _psql(build, port, SETUP_SQL)
        t_loaded = time.monotonic()
        # Slices after initialization share what is left of SECONDS: whole seconds (pgbench
        # -T), at least 2 each, summing to at most what is left.
        n = len(plan["phases"])
        left = max(2 * n, int(seconds - (t_loaded - t_up)))
        planned = sum(s for _, s in plan["phases"])
        slices = [max(2, int(s * left / planned)) for _, s in plan["phases"]]
        for k in range(max(0, left - sum(slices))):
            slices[k % n] += 1
        phases = []
        for i, ((phase, _), secs) in enumerate(zip(plan["phases"], slices)):
            args = [*phase.args, "-T", str(secs), f"--random-seed={seed * 1000 + i}"]
            started = time.monotonic()
            code, out = _pgbench(build, port, args, tmp, secs + 60)
            m = re.search(r"number of transactions actually processed: (\d+)", out)
            failed = re.search(r"number of failed transactions: (\d+)", out)
            phases.append({"phase": phase.name, "seconds": secs, "exit_code": code,
                           "transactions": int(m.group(1)) if m else 0,
                           "failed_transactions": int(failed.group(1)) if failed else None,
                           "wall_s": round(time.monotonic() - started, 2),
                           **({"error": out[-600:]} if code != 0 else {})})
        record["phases"] = phases
        record["failed_phases"] = [p["phase"] for p in phases if p["exit_code"] != 0]
        record["init_s"] = round(t_init - t0, 2)
        record["pgbench_init_s"] = round(t_loaded - t_up, 2)
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)  # fast shutdown: backends exit normally
            try:
                code = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGQUIT)
                code = proc.wait(30)
            record["exit_code"] = code
        record["wall_s"] = round(time.monotonic() - t0, 2)
        record["files"] = common.move_profiles(staging, out_dir)
        log_tail = pathlib.Path(log).read_text(errors="replace")[-3000:] if os.path.exists(log) else ""
        shutil.rmtree(tmp, ignore_errors=True)
    if record.get("exit_code") != 0:
        raise ServerSetupError(f"postgres {version}: server exited with "
                               f"{record.get('exit_code')}\n{log_tail}")
    return record


def _print_plan(seed: int, seconds: float) -> None:
    plan = load_plan(seed, seconds)
    print(f"pgbench -i -s {plan['scale']}")
    for phase, s in plan["phases"]:
        print(f"{s:3d} s  {phase.describe()}")


def main() -> int:
    return common.cli("postgres", ensure, _print_plan)


if __name__ == "__main__":
    sys.exit(main())
