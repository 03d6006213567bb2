"""Real-server families for the lifetime benchmarks (issue 11): Redis and PostgreSQL.

Each module fetches (and, for Redis from Debian's source archive, builds) its server
into a cache outside the repository, starts it under the allocation-lifetime sampler
on 127.0.0.1 / a unix socket in a temporary directory, drives it with the server's own
load generator (``redis-benchmark``, ``pgbench``) following a phase plan that is
deterministic for a given seed and the same for every version, stops it cleanly and
leaves one ``.ltprof`` per server process in the requested directory.

    benchmarks/servers/common.py    cache, wheels, reserved versions, ports, users
    benchmarks/servers/redis.py     Redis 5.0.6, 6.0.16 (Debian source), 6.2.7/9/14
    benchmarks/servers/postgres.py  PostgreSQL 15.5, 16.2 (pgserver wheels)
    benchmarks/servers/profile.py   CLI: profile versions x runs, write summary.json

Reserved (never fetched, built, profiled, trained or tested on here): Redis >= 7.0 and
PostgreSQL >= 17. Both modules refuse them with ``ReservedVersionError``.
"""
