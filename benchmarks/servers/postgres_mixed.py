"""PostgreSQL with mixed fates: long sessions, caches, temp tables, short sessions.

Written to break per-context lifetime prediction (issue 21, item 2).  Issue 11's
pgbench load had almost no long-lived allocations (99% of its bytes were memory-context
blocks freed within 10 ms); a real PostgreSQL keeps a lot for the whole session, and
the same code paths serve objects with very different fates:

  * the relation / catalog caches (relcache, syscache) are filled by the same code for
    a permanent table (kept for the session), a temporary table (dropped 0.2 s - 20 s
    later, at shrink, or at the session's end) and a table whose columns and indexes
    a DDL session changes (every backend rebuilds the entry: the old one is freed);
  * the plan cache: PREPARE keeps a CachedPlanSource; the first five EXECUTEs plan a
    custom (per-execution) plan, the sixth keeps a generic one -- the same planner
    allocating short-lived and long-lived trees; statements are DEALLOCATEd 1-20 s
    later, at shrink, or kept;
  * WITH HOLD cursors materialize their rows (tuplestore) and keep them until CLOSE
    (0.5 - 20 s later, or at shrink), on the path a per-query sort or materialization
    uses for milliseconds;
  * PL/pgSQL functions are compiled and cached per session, some dropped later;
  * short sessions (connect, a few queries, a temp table, disconnect): the backend's
    whole heap dies with it, whatever the paths predicted;
  * bulk loads (INSERT ... SELECT generate_series) and DELETEs, and pgbench
    (-M prepared, protocol-level prepared statements) on two connections held for the
    whole run, rate-limited.

Sessions: LONG_SESSIONS connections opened at the start and held to the end (the last
of them, the "mid" session, disconnects when `steady` begins: its heap dies in the
middle of the trace), plus the short sessions and pgbench's two.  Schema (created by
a setup session before the phases, in the profiled server): N_TABLES `cat_i` tables
with an index each, DDL_TABLES `ddl_j` tables, `items` (ITEMS rows) and `bulk`.

Phases (wall clock, PHASES): warm (a few tables), grow (every table touched, most
prepared statements, temp tables, cursors and functions of the run made), peak,
shrink (DEALLOCATE / DROP / CLOSE of what was made for it), steady (create-and-free
traffic on the same paths).  Rates per session and phase in RATES.

Pacing (as benchmarks/servers/redis_mixed.py): ticks of TICK_S; the statements of
tick i (per connection, and the short session that starts in it) are a pure function
of (seed, i), sent at t0 + i * TICK_S over PostgreSQL's simple-query protocol by one
Python driver (a minimal client: no driver library needed, trust authentication),
every reply counted; the run record says how well the pacing held and the server's
counters (pg_stat_database: transactions, sessions).  pgbench's rate limit (-R) with
--random-seed makes its schedule a function of the seed too.

PostgreSQL 17+ is reserved (postgres.check_version).  The server runs as an
unprivileged user when we are root, exactly as benchmarks/servers/postgres.py runs it.

    python3 -m benchmarks.servers.postgres_mixed plan --seed 1       # counts, sha256
    .venv/bin/python -m benchmarks.servers.postgres_mixed run 15.5 out/pg-mixed --seed 1
"""

from __future__ import annotations

import collections
import contextlib
import hashlib
import heapq
import os
import pathlib
import random
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time

from benchmarks.servers import common, machine, postgres
from benchmarks.servers.common import ServerSetupError

TICK_S = 0.05
PHASES = (("warm", 4.0), ("grow", 14.0), ("peak", 6.0), ("shrink", 10.0), ("steady", 26.0))
LONG_SESSIONS = 4          # the last one is the "mid" session (ends when steady begins)
N_TABLES = 120
DDL_TABLES = 6
TABLE_ROWS = 200
ITEMS = 30000
# actions per second per long session, by phase
RATES = {
    "warm":   {"touch": 10, "prep": 2, "exec": 8, "temp": 0.5, "cursor": 0.3, "fetch": 1,
               "analytic": 2, "bulk": 0.2, "func": 0.3, "ddl": 0.2},
    "grow":   {"touch": 40, "prep": 10, "exec": 25, "temp": 2.0, "cursor": 1.2, "fetch": 3,
               "analytic": 3, "bulk": 0.5, "func": 0.8, "ddl": 0.5},
    "peak":   {"touch": 25, "prep": 2, "exec": 35, "temp": 0.5, "cursor": 0.3, "fetch": 4,
               "analytic": 5, "bulk": 0.3, "func": 0.2, "ddl": 0.2},
    "shrink": {"touch": 15, "prep": 2, "exec": 20, "temp": 0.8, "cursor": 0.4, "fetch": 2,
               "analytic": 3, "bulk": 0.3, "func": 0.2, "ddl": 0.3},
    "steady": {"touch": 15, "prep": 3, "exec": 20, "temp": 1.0, "cursor": 0.5, "fetch": 2,
               "analytic": 3, "bulk": 0.3, "func": 0.3, "ddl": 0.3},
}
SHORT_PER_S = {"warm": 1.0, "grow": 2.0, "peak": 2.0, "shrink": 2.0, "steady": 2.5}
# fates (weights) of what a long session makes, by the phase it is made in
PREP_FATES = {"grow": {"keep": 0.35, "shrink": 0.35, "later": 0.30},
              "other": {"keep": 0.10, "shrink": 0.0, "later": 0.90}}
TEMP_FATES = {"grow": {"short": 0.3, "later": 0.2, "shrink": 0.3, "keep": 0.2},
              "other": {"short": 0.6, "later": 0.35, "shrink": 0.0, "keep": 0.05}}
CURSOR_FATES = {"grow": {"later": 0.4, "shrink": 0.5, "keep": 0.1},
                "other": {"later": 0.95, "shrink": 0.0, "keep": 0.05}}
FUNC_FATES = {"grow": {"keep": 0.5, "later": 0.5}, "other": {"keep": 0.1, "later": 0.9}}
PGBENCH = {"clients": 2, "rate": 40}
SERVER_SETTINGS = {"work_mem": "16MB", "temp_buffers": "16MB", "max_connections": "60",
                   "shared_buffers": "32MB", "autovacuum_naptime": "10s",
                   "max_locks_per_transaction": "256"}


def _phase_at(t: float, phases) -> str:
    acc = 0.0
    for name, secs in phases:
        acc += secs
        if t < acc - 1e-9:
            return name
    return phases[-1][0]


class Plan:
    """The statements of every tick for SEED: {tick: {conn: [sql, ...]}} for the long
    sessions (conn 0..LONG_SESSIONS-1), {tick: [sql, ...]} for short sessions, the
    tick at which the mid session closes, and counts per kind."""

    def __init__(self, seed: int, scale: float = 1.0, phases=PHASES):
        self.seed, self.scale, self.phases = seed, scale, tuple(phases)
        self.seconds = sum(s for _, s in self.phases)
        self.n_ticks = int(round(self.seconds / TICK_S))
        self.long: dict[int, dict[int, list[str]]] = collections.defaultdict(
            lambda: collections.defaultdict(list))
        self.short: dict[int, list[str]] = {}
        self.counts: collections.Counter = collections.Counter()
        starts, acc = {}, 0.0
        for name, secs in self.phases:
            starts[name] = int(round(acc / TICK_S))
            acc += secs
        self.phase_starts = starts
        self.mid_close_tick = starts.get("steady", self.n_ticks)
        self._build()

    # --- generation -------------------------------------------------------------
    def _build(self) -> None:
        rng = random.Random(f"postgres-mixed-{self.seed}")
        shrink_t = self.phase_starts.get("shrink", self.n_ticks)
        later: list = []  # heap of (tick, seq, conn, sql, kind)
        seq = 0
        state = [{"prep": {}, "temp": set(), "cursor": set(), "func": set(), "ddlcol": [],
                  "n": 0} for _ in range(LONG_SESSIONS)]

        def schedule(tick, conn, sql, kind):
            nonlocal seq
            seq += 1
            heapq.heappush(later, (tick, seq, conn, sql, kind))

        for tick in range(self.n_ticks):
            phase = _phase_at(tick * TICK_S, self.phases)
            fate_key = "grow" if phase == "grow" else "other"
            # scheduled statements due now (for sessions still open)
            while later and later[0][0] <= tick:
                _, _, conn, sql, kind = heapq.heappop(later)
                if conn == LONG_SESSIONS - 1 and tick >= self.mid_close_tick:
                    continue
                self._emit(tick, conn, sql, kind, state[conn])
            for conn in range(LONG_SESSIONS):
                if conn == LONG_SESSIONS - 1 and tick >= self.mid_close_tick:
                    continue
                st = state[conn]
                for kind, rate in RATES[phase].items():
                    if kind == "ddl" and conn != 0:
                        continue  # one DDL session: no conflicting DDL orders
                    lam = rate * self.scale * TICK_S
                    k = int(lam) + (1 if rng.random() < lam - int(lam) else 0)
                    for _ in range(k):
                        st["n"] += 1
                        n = st["n"]
                        made = self._make(rng, kind, conn, n, phase, st)
                        if made is None:
                            continue
                        for sql in made["now"]:
                            self._emit(tick, conn, sql, kind, st)
                        fate = made.get("fate")
                        if fate is None:
                            continue
                        table = {"prep": PREP_FATES, "temp": TEMP_FATES, "cursor": CURSOR_FATES,
                                 "func": FUNC_FATES, "ddl": {"grow": {"later": 1}, "other": {"later": 1}},
                                 "bulk": {"grow": {"later": 1}, "other": {"later": 1}}}[kind][fate_key]
                        f = rng.choices(list(table), weights=list(table.values()))[0]
                        self.counts[f"{kind}_fate_{f}"] += 1
                        for delay_s, sql in made.get("follow", []):
                            schedule(tick + max(1, int(delay_s / TICK_S)), conn, sql, "follow")
                        end = made["end"]
                        if f == "keep":
                            continue
                        if f == "shrink":
                            when = shrink_t + rng.randrange(0, int(3 / TICK_S))
                        elif f == "short":
                            when = tick + max(1, int(rng.uniform(0.2, 3.0) / TICK_S))
                        else:
                            lo, hi = made.get("later", (1.0, 20.0))
                            when = tick + max(1, int(rng.uniform(lo, hi) / TICK_S))
                        if when < self.n_ticks:
                            schedule(when, conn, end, f"{kind}_end")
            # short sessions
            lam = SHORT_PER_S[phase] * self.scale * TICK_S
            if rng.random() < lam:
                self.short[tick] = self._short_session(rng, tick)
                self.counts["short_sessions"] += 1
                self.counts["short_statements"] += len(self.short[tick])

    def _emit(self, tick, conn, sql, kind, st) -> None:
        # keep the session state consistent with what was actually sent
        m = re.match(r"(DEALLOCATE|DROP TABLE|CLOSE|DROP FUNCTION) (\w+)", sql)
        if m:
            what, name = m.groups()
            bag = {"DEALLOCATE": st["prep"], "DROP TABLE": st["temp"], "CLOSE": st["cursor"],
                   "DROP FUNCTION": st["func"]}[what]
            if name not in bag:
                return
            if isinstance(bag, dict):
                del bag[name]
            else:
                bag.discard(name)
        else:  # a statement that uses a session object needs it still there
            for name in re.findall(r"\b((?:tt|fn|p|cur)\d+_\d+)\b", sql):
                bag = {"tt": st["temp"], "fn": st["func"], "p": st["prep"],
                       "cur": st["cursor"]}[re.match(r"[a-z]+", name).group()]
                if name not in bag:
                    return
        self.long[tick][conn].append(sql)
        self.counts[kind] += 1

    def _make(self, rng, kind, conn, n, phase, st):
        t_hi = 20 if phase == "warm" else N_TABLES
        t = rng.randrange(t_hi)
        u = rng.randrange(t_hi)
        if kind == "touch":
            k = rng.randrange(1, TABLE_ROWS)
            q = rng.choice([
                f"SELECT a, b FROM cat_{t} WHERE id = {k}",
                f"SELECT count(*), max(c) FROM cat_{t} WHERE a BETWEEN {k} AND {k + 20}",
                f"SELECT x.b, y.c FROM cat_{t} x JOIN cat_{u} y ON x.a = y.a WHERE x.id < {k} LIMIT 20",
                f"SELECT d.* FROM ddl_{t % DDL_TABLES} d WHERE d.id = {k}",
            ])
            return {"now": [q]}
        if kind == "prep":
            name = f"p{conn}_{n}"
            ins = ", ".join(str(rng.randrange(TABLE_ROWS)) for _ in range(rng.randrange(5, 60)))
            body = rng.choice([
                f"(int) AS SELECT id, b, c FROM cat_{t} WHERE a = $1",
                f"(int, int) AS SELECT x.id, y.b FROM cat_{t} x JOIN cat_{u} y USING (id) "
                f"WHERE x.a BETWEEN $1 AND $2",
                f"(int) AS SELECT grp, count(*), string_agg(left(payload, 6), ',') FROM items "
                f"WHERE grp = $1 GROUP BY grp",
                f"(int) AS SELECT x.id, y.c, z.b FROM cat_{t} x JOIN cat_{u} y ON x.id = y.id "
                f"JOIN ddl_{t % DDL_TABLES} z ON z.id = x.a WHERE x.id IN ({ins}) AND y.a > $1",
                f"(int) AS WITH w AS (SELECT id, a, rank() OVER (PARTITION BY a % 7 ORDER BY c) r "
                f"FROM cat_{t}) SELECT a, count(*) FROM w WHERE r <= $1 GROUP BY a",
            ])
            nargs = body.count("int")
            args = lambda: ", ".join(str(rng.randrange(TABLE_ROWS)) for _ in range(nargs))  # noqa: E731
            st["prep"][name] = nargs
            follow = [(rng.uniform(0.05, 8.0), f"EXECUTE {name}({args()})")
                      for _ in range(rng.randrange(1, 9))]
            return {"now": [f"PREPARE {name}{body}", f"EXECUTE {name}({args()})"],
                    "fate": True, "end": f"DEALLOCATE {name}", "follow": follow}
        if kind == "exec":
            if not st["prep"]:
                return None
            name = rng.choice(sorted(st["prep"]))
            args = ", ".join(str(rng.randrange(TABLE_ROWS)) for _ in range(st["prep"][name]))
            return {"now": [f"EXECUTE {name}({args})"]}
        if kind == "temp":
            name = f"tt{conn}_{n}"
            rows = rng.randrange(50, 3000)
            st["temp"].add(name)
            return {"now": [f"CREATE TEMP TABLE {name} (id int PRIMARY KEY, v text, w numeric)",
                            f"INSERT INTO {name} SELECT g, md5(g::text), g % 97 FROM "
                            f"generate_series(1, {rows}) g",
                            f"SELECT w, count(*) FROM {name} GROUP BY w ORDER BY 2 DESC, 1 LIMIT 5"],
                    "fate": True, "end": f"DROP TABLE {name}",
                    "follow": [(rng.uniform(0.1, 2.0), f"SELECT count(*) FROM {name} t JOIN "
                                f"cat_{t} c ON c.id = t.id")]}
        if kind == "cursor":
            name = f"cur{conn}_{n}"
            g = rng.randrange(0, 200)
            st["cursor"].add(name)
            return {"now": [f"BEGIN; DECLARE {name} CURSOR WITH HOLD FOR SELECT id, payload, grp "
                            f"FROM items WHERE grp BETWEEN {g} AND {g + rng.randrange(2, 40)} "
                            f"ORDER BY payload; COMMIT"],
                    "fate": True, "end": f"CLOSE {name}", "later": (0.5, 20.0)}
        if kind == "fetch":
            if not st["cursor"]:
                return None
            return {"now": [f"FETCH 20 FROM {rng.choice(sorted(st['cursor']))}"]}
        if kind == "analytic":
            a = rng.randrange(1, ITEMS - 5000)
            w = rng.randrange(500, 5000)
            return {"now": [rng.choice([
                f"SELECT grp, count(*), sum(length(payload)), string_agg(left(payload, 8), '' "
                f"ORDER BY id) FROM items WHERE id BETWEEN {a} AND {a + w} GROUP BY grp "
                f"ORDER BY 3 DESC LIMIT 10",
                f"SELECT id, payload FROM items WHERE id BETWEEN {a} AND {a + w} ORDER BY "
                f"payload DESC LIMIT 5",
                f"SELECT count(*) FROM (SELECT id, rank() OVER (PARTITION BY grp ORDER BY "
                f"payload) r FROM items WHERE id BETWEEN {a} AND {a + w}) s WHERE r < 3",
                f"SELECT md5(string_agg(payload, '' ORDER BY payload)) FROM items WHERE id "
                f"BETWEEN {a} AND {a + w // 4}",
            ])]}
        if kind == "bulk":
            rows = rng.randrange(1000, 8000)
            base = (conn * 10_000_000) + n * 10_000
            return {"now": [f"INSERT INTO bulk (k, payload) SELECT {base} + g, repeat(md5(g::text), "
                            f"{rng.randrange(1, 4)}) FROM generate_series(1, {rows}) g"],
                    "fate": True, "end": f"DELETE FROM bulk WHERE k BETWEEN {base} AND {base + rows}",
                    "later": (1.0, 15.0)}
        if kind == "func":
            name = f"fn{conn}_{n}"
            m = rng.randrange(3, 50)
            st["func"].add(name)
            follow = [(rng.uniform(0.1, 10.0), f"SELECT {name}({rng.randrange(10, 400)})")
                      for _ in range(rng.randrange(1, 6))]
            return {"now": [f"CREATE FUNCTION {name}(x int) RETURNS int LANGUAGE plpgsql AS $f$ "
                            f"DECLARE s int := 0; r record; BEGIN FOR i IN 1..x LOOP s := s + i % {m}; "
                            f"END LOOP; FOR r IN SELECT a FROM cat_{t} WHERE id < {m} LOOP "
                            f"s := s + r.a; END LOOP; RETURN s; END $f$",
                            f"SELECT {name}({rng.randrange(10, 400)})"],
                    "fate": True, "end": f"DROP FUNCTION {name}(int)", "follow": follow}
        if kind == "ddl":
            j = rng.randrange(DDL_TABLES)
            col = f"x{n}"
            if rng.random() < 0.5:
                return {"now": [f"ALTER TABLE ddl_{j} ADD COLUMN {col} int DEFAULT {n}"],
                        "fate": True, "end": f"ALTER TABLE ddl_{j} DROP COLUMN {col}",
                        "later": (0.5, 10.0)}
            return {"now": [f"CREATE INDEX ddl_{j}_{col} ON ddl_{j} (a, id)"],
                    "fate": True, "end": f"DROP INDEX ddl_{j}_{col}", "later": (0.5, 10.0)}
        raise ValueError(kind)

    def _short_session(self, rng, tick) -> list[str]:
        out = []
        for _ in range(rng.randrange(2, 7)):
            t = rng.randrange(N_TABLES)
            out.append(f"SELECT a, b, c FROM cat_{t} WHERE id = {rng.randrange(TABLE_ROWS)}")
        if rng.random() < 0.5:
            t = rng.randrange(N_TABLES)
            out += [f"PREPARE s(int) AS SELECT b FROM cat_{t} WHERE a = $1",
                    f"EXECUTE s({rng.randrange(TABLE_ROWS)})", f"EXECUTE s({rng.randrange(TABLE_ROWS)})"]
        if rng.random() < 0.4:
            out += [f"CREATE TEMP TABLE s_tmp AS SELECT g AS id, md5(g::text) AS v FROM "
                    f"generate_series(1, {rng.randrange(100, 2000)}) g",
                    "SELECT count(*), max(v) FROM s_tmp"]
        if rng.random() < 0.3:
            a = rng.randrange(1, ITEMS - 3000)
            out.append(f"SELECT grp, count(*) FROM items WHERE id BETWEEN {a} AND {a + 2000} "
                       f"GROUP BY grp ORDER BY 2 DESC LIMIT 3")
        return out

    # --- views ------------------------------------------------------------------
    def ticks(self):
        for i in range(self.n_ticks):
            yield i, _phase_at(i * TICK_S, self.phases), self.long.get(i, {}), self.short.get(i)

    def statements(self) -> int:
        return (sum(len(v) for d in self.long.values() for v in d.values())
                + sum(len(v) for v in self.short.values()))

    def sha256(self) -> str:
        h = hashlib.sha256()
        for i in range(self.n_ticks):
            for conn, sqls in sorted(self.long.get(i, {}).items()):
                for s in sqls:
                    h.update(f"{i} {conn} {s}\n".encode())
            for s in self.short.get(i, []):
                h.update(f"{i} s {s}\n".encode())
        return h.hexdigest()

    def summary(self) -> dict:
        return {"seed": self.seed, "scale": self.scale, "seconds": self.seconds,
                "tick_s": TICK_S, "ticks": self.n_ticks, "phase_starts": self.phase_starts,
                "long_sessions": LONG_SESSIONS, "mid_session_closes_at_tick": self.mid_close_tick,
                "statements": self.statements(), "counts": dict(sorted(self.counts.items())),
                "pgbench": PGBENCH, "sha256": self.sha256()}


SETUP = [
    *(f"CREATE TABLE cat_{i} (id int PRIMARY KEY, a int, b text, c numeric); "
      f"CREATE INDEX cat_{i}_a ON cat_{i} (a); INSERT INTO cat_{i} SELECT g, (g * {i + 7}) % "
      f"{TABLE_ROWS}, md5((g + {i})::text), g % 13 FROM generate_series(1, {TABLE_ROWS}) g"
      for i in range(N_TABLES)),
    *(f"CREATE TABLE ddl_{j} (id int PRIMARY KEY, a int, b text); INSERT INTO ddl_{j} "
      f"SELECT g, g % 50, md5(g::text) FROM generate_series(1, {TABLE_ROWS}) g"
      for j in range(DDL_TABLES)),
    f"CREATE TABLE items (id int PRIMARY KEY, grp int, payload text); INSERT INTO items "
    f"SELECT g, g % 250, repeat(md5(g::text), 1 + g % 4) FROM generate_series(1, {ITEMS}) g; "
    "CREATE INDEX items_grp ON items (grp)",
    "CREATE TABLE bulk (id bigserial PRIMARY KEY, k bigint, payload text); "
    "CREATE INDEX bulk_k ON bulk (k)",
    "VACUUM ANALYZE",
]


# --- a minimal PostgreSQL client (protocol 3.0, simple query, trust auth) -----------

class Conn:
    """One non-blocking connection: queued statements go out as Query messages; replies
    are parsed only for ReadyForQuery ('Z') and ErrorResponse ('E')."""

    def __init__(self, port: int, name: str):
        self.name = name
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setblocking(False)
        payload = (struct.pack("!i", 196608) + b"user\0postgres\0database\0postgres\0"
                   b"application_name\0" + name.encode() + b"\0\0")
        self.out = bytearray(struct.pack("!i", len(payload) + 4) + payload)
        self.inbuf = bytearray()
        self.expected = 1   # ReadyForQuery after startup
        self.ready = 0
        self.errors = 0
        self.first_error = ""
        self.sent = 0
        self.closed = False
        self.terminating = False

    def query(self, sql: str) -> None:
        body = sql.encode() + b"\0"
        self.out += b"Q" + struct.pack("!i", len(body) + 4) + body
        self.expected += 1
        self.sent += 1

    def terminate(self) -> None:
        self.out += b"X" + struct.pack("!i", 4)
        self.terminating = True

    def pending(self) -> bool:
        return bool(self.out) or self.ready < self.expected

    def pump(self) -> None:
        if self.closed:
            return
        try:
            while self.out:
                n = self.sock.send(self.out)
                if n <= 0:
                    break
                del self.out[:n]
        except BlockingIOError:
            pass
        except OSError:
            if not self.terminating:
                raise
        while True:
            try:
                data = self.sock.recv(1 << 20)
            except BlockingIOError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                self.closed = True
                break
            self.inbuf += data
        self._parse()

    def _parse(self) -> None:
        buf, i = self.inbuf, 0
        while len(buf) - i >= 5:
            kind = buf[i]
            length = int.from_bytes(buf[i + 1:i + 5], "big")
            if len(buf) - i < 1 + length:
                break
            if kind == 0x5A:        # Z
                self.ready += 1
            elif kind == 0x45:      # E
                self.errors += 1
                if not self.first_error:
                    fields = bytes(buf[i + 5:i + 1 + length]).split(b"\0")
                    msg = [f[1:].decode(errors="replace") for f in fields if f[:1] in (b"M", b"C")]
                    self.first_error = f"{self.name}: " + " ".join(msg)
            elif kind == 0x52:      # R: authentication request; only 0 (ok) is handled
                code = int.from_bytes(buf[i + 5:i + 9], "big")
                if code != 0:
                    raise ServerSetupError(f"{self.name}: server asks for authentication {code}")
            i += 1 + length
        del buf[:i]

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()
        self.closed = True


def _wait_all(conns, deadline: float) -> None:
    while any(c.pending() and not c.closed for c in conns) and time.monotonic() < deadline:
        socks = [c.sock for c in conns if not c.closed]
        if not socks:
            break
        select.select(socks, [c.sock for c in conns if c.out and not c.closed], [], 0.2)
        for c in conns:
            c.pump()


def run_sql(port: int, statements, name: str = "setup", timeout: float = 300) -> dict:
    c = Conn(port, name)
    for s in statements:
        c.query(s)
    c.terminate()
    _wait_all([c], time.monotonic() + timeout)
    _wait_closed([c], time.monotonic() + 30)
    if c.errors:
        raise ServerSetupError(f"{name}: {c.errors} errors, first: {c.first_error}")
    return {"sent": c.sent, "replies": c.ready - 1}


def _wait_closed(conns, deadline: float) -> None:
    while any(not c.closed for c in conns) and time.monotonic() < deadline:
        select.select([c.sock for c in conns if not c.closed], [], [], 0.2)
        for c in conns:
            c.pump()
    for c in conns:
        c.close()


def drive(port: int, plan: Plan, on_phase=None) -> dict:
    """Sends PLAN paced by the wall clock; waits for every reply."""
    longs = [Conn(port, f"long{i}") for i in range(LONG_SESSIONS)]
    shorts: list[Conn] = []
    done_short: list[Conn] = []
    lags: list[float] = []
    marks: dict[str, float] = {}
    phase = None
    t0 = time.monotonic()
    for i, ph, per_conn, short in plan.ticks():
        if ph != phase:
            phase = ph
            marks[ph] = round(time.monotonic() - t0, 3)
            if on_phase:
                on_phase(ph)
        target = t0 + i * TICK_S
        while True:
            now = time.monotonic()
            if now >= target:
                break
            socks = [c.sock for c in [*longs, *shorts] if not c.closed]
            select.select(socks, [], [], min(target - now, 0.02))
            for c in [*longs, *shorts]:
                c.pump()
        lags.append(max(0.0, now - target))
        for conn, sqls in per_conn.items():
            for s in sqls:
                longs[conn].query(s)
        if i == plan.mid_close_tick:
            longs[-1].terminate()
        if short:
            c = Conn(port, f"short{i}")
            for s in short:
                c.query(s)
            c.terminate()
            shorts.append(c)
        for c in [*longs, *shorts]:
            c.pump()
        still = []
        for c in shorts:
            (done_short if c.closed else still).append(c)
        shorts = still
    marks["end_of_sending"] = round(time.monotonic() - t0, 3)
    _wait_all([*longs, *shorts], time.monotonic() + 300)
    marks["all_replies"] = round(time.monotonic() - t0, 3)
    for c in longs:
        if not c.terminating:
            c.terminate()
    _wait_closed([*longs, *shorts], time.monotonic() + 60)
    done_short += shorts
    every = [*longs, *done_short]
    late = [x for x in lags if x > 0.05]
    return {"sent": sum(c.sent for c in every),
            "replies": sum(max(0, c.ready - 1) for c in every),
            "errors": sum(c.errors for c in every),
            "first_error": next((c.first_error for c in every if c.first_error), ""),
            "long_sent": [c.sent for c in longs], "short_sessions": len(done_short),
            "phase_marks_s": marks,
            "pacing": {"ticks": len(lags), "planned_s": plan.seconds,
                       "late_ticks_over_50ms": len(late),
                       "late_share": round(len(late) / max(1, len(lags)), 4),
                       "max_lag_s": round(max(lags, default=0.0), 3),
                       "mean_lag_s": round(sum(lags) / max(1, len(lags)), 4),
                       "sending_s": marks["end_of_sending"]}}


# --- the server -------------------------------------------------------------------

@contextlib.contextmanager
def profiled_server(version: str, out_dir: str, *, full_trace: bool, interval: int | None,
                    seed: int, record: dict):
    """initdb (not profiled), then postgres under the sampler as postgres.profile() runs
    it (an unprivileged user when we are root, staged build and sampler); yields
    (build, port, tmp); fast shutdown and the profiles moved to OUT_DIR at the end."""
    from profiler import launch

    user = common.run_user()
    build = postgres.runnable_by(postgres.ensure(version), user)
    os.makedirs(out_dir, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f"lt-pg-mixed-{version}-")
    data, staging, log = (os.path.join(tmp, "data"), os.path.join(tmp, "profiles"),
                          os.path.join(tmp, "postgres.log"))
    os.mkdir(staging)
    if os.geteuid() == 0 and user.uid != 0:
        for p in (tmp, staging):
            os.chown(p, user.uid, user.gid)
    os.chmod(tmp, 0o755)
    server_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LC_ALL": "C", "HOME": tmp}
    record.update({"server": build.to_json(), "user": user.name})
    proc = None
    t0 = time.monotonic()
    try:
        postgres.initdb(build, data, server_env, tmp, user, version)
        record["init_s"] = round(time.monotonic() - t0, 2)
        port = common.free_port()
        env = launch.profiled_env(staging, None if full_trace else interval,
                                  f"postgres-{version}", {"LIFETIME_SEED": str(seed)},
                                  base=server_env, full_trace=full_trace)
        env["LD_PRELOAD"] = env["LD_PRELOAD"].replace(launch.sampler_library_path(),
                                                      common.sampler_for(user))
        # settings in postgresql.conf, not on the command line: the profiles keep argv
        # whole (the sampler cuts strings over 256 bytes, and the dataset job notes it)
        settings = {"listen_addresses": "'127.0.0.1'", "fsync": "off",
                    "synchronous_commit": "off", "full_page_writes": "off",
                    "log_min_messages": "warning", "logging_collector": "off",
                    **{k: f"'{v}'" for k, v in SERVER_SETTINGS.items()}}
        with open(os.path.join(data, "postgresql.conf"), "a") as conf:
            conf.write("\n# benchmarks/servers/postgres_mixed.py\n"
                       + "".join(f"{k} = {v}\n" for k, v in settings.items()))
        cmd = [build.tool("postgres"), "-D", data, "-p", str(port), "-k", tmp]
        with open(log, "w") as logf:
            if os.geteuid() == 0:
                os.chown(log, user.uid, user.gid)
            proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=logf,
                                    stderr=subprocess.STDOUT, cwd=tmp, **user.popen_kwargs())
        common.wait_until(lambda: postgres._ready(build, port), 60, f"postgres {version}",
                          proc, log)
        record["server_pid"] = proc.pid
        yield build, port, tmp
    finally:
        if proc is not None:
            proc.send_signal(signal.SIGINT)
            try:
                code = proc.wait(120)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGQUIT)
                code = proc.wait(30)
            record["exit_code"] = code
        record["files"] = common.move_profiles(staging, out_dir)
        record["log_tail"] = (pathlib.Path(log).read_text(errors="replace")[-2000:]
                              if os.path.exists(log) else "")
        shutil.rmtree(tmp, ignore_errors=True)


def _stats(build, port) -> dict:
    out = postgres._psql(build, port, "SELECT xact_commit, xact_rollback, tup_inserted, "
                         "tup_deleted, sessions FROM pg_stat_database WHERE datname = 'postgres'")
    keys = ("xact_commit", "xact_rollback", "tup_inserted", "tup_deleted", "sessions")
    return dict(zip(keys, (int(x) for x in out.strip().split("|"))))


def run(version: str, out_dir: str, seed: int = 1, full_trace: bool = False,
        interval: int | None = None, scale: float = 1.0, phases=PHASES, **_ignored) -> dict:
    """Profiles VERSION's postmaster and every process it forks through the mixed load
    into OUT_DIR (one profile per process; sampled at INTERVAL bytes, or every
    allocation with FULL_TRACE); returns a run record."""
    postgres.check_version(version)
    out_dir = os.path.abspath(out_dir)
    plan = Plan(seed, scale, phases)
    record: dict = {"workload": "postgres-mixed", "family": "postgres", "version": version,
                    "seed": seed, "scale": scale, "full_trace": full_trace,
                    "interval": None if full_trace else interval}
    t0 = time.monotonic()
    before = machine.snapshot()
    with profiled_server(version, out_dir, full_trace=full_trace, interval=interval, seed=seed,
                         record=record) as (build, port, tmp):
        t_setup = time.monotonic()
        run_sql(port, SETUP, "setup")
        code, out = postgres._pgbench(build, port, ["-i", "-s", "1", "-q"], tmp, 300)
        if code != 0:
            raise ServerSetupError(f"pgbench -i failed ({code}):\n{out[-2000:]}")
        record["setup_s"] = round(time.monotonic() - t_setup, 2)
        record["settings_seen"] = {k: postgres._psql(build, port, f"SHOW {k}").strip()
                                   for k in ("work_mem", "temp_buffers", "fsync")}
        stats0 = _stats(build, port)
        bench = subprocess.Popen(
            [build.tool("pgbench"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
             "-b", "select-only@3", "-b", "simple-update@1", "-M", "prepared", "-n",
             "-c", str(PGBENCH["clients"]), "-j", "1", "-R", str(PGBENCH["rate"]),
             "-T", str(int(plan.seconds)), f"--random-seed={seed}", "postgres"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp,
            env=postgres._client_env())
        try:
            with machine.Monitor(pid=record.get("server_pid")) as mon:
                driven = drive(port, plan)
            bench_out, _ = bench.communicate(timeout=120)
        finally:
            if bench.poll() is None:
                bench.kill()
                bench.wait()
        stats1 = _stats(build, port)
    wall = time.monotonic() - t0
    if record.get("exit_code") != 0:
        raise ServerSetupError(f"postgres {version}: server exited with "
                               f"{record.get('exit_code')}\n{record.get('log_tail')}")
    m = re.search(r"number of transactions actually processed: (\d+)", bench_out)
    summary = plan.summary()
    record.update({
        "wall_s": round(wall, 2), "plan": summary, "driver": driven,
        "pgbench": {"exit_code": bench.returncode,
                    "transactions": int(m.group(1)) if m else 0,
                    **({"output": bench_out[-800:]} if bench.returncode else {})},
        "server_stats": {k: stats1[k] - stats0[k] for k in stats1},
        "machine": {"before": before, "during": mon.summary(), "after": machine.snapshot()}})
    return record


def main() -> int:
    import argparse
    import json

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("plan", help="print the plan's counts and sha256 (no server)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scale", type=float, default=1.0)
    r = sub.add_parser("run", help="profile a version through the load")
    r.add_argument("version")
    r.add_argument("out_dir")
    r.add_argument("--seed", type=int, default=1)
    r.add_argument("--scale", type=float, default=1.0)
    r.add_argument("--interval", type=int, default=65536)
    r.add_argument("--full-trace", action="store_true")
    a = ap.parse_args()
    if a.cmd == "plan":
        print(json.dumps(Plan(a.seed, a.scale).summary(), indent=1))
        return 0
    rec = run(a.version, os.path.join(a.out_dir, "profiles"), seed=a.seed,
              full_trace=a.full_trace, interval=a.interval, scale=a.scale)
    with open(os.path.join(a.out_dir, "run.json"), "w") as f:
        json.dump(rec, f, indent=1)
    print(json.dumps({k: rec[k] for k in ("version", "wall_s", "files", "pgbench",
                                          "server_stats")}, indent=1))
    print(json.dumps(rec["driver"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
