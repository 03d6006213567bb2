"""What the machine was doing while a benchmark ran: load average, CPU busy and steal
shares (all cores, from /proc/stat), and optionally one process's CPU share, sampled
once a second in a thread.  Lifetimes are measured on the wall clock, so a loaded
machine changes the labels (a request that waits for a CPU lives longer); every run
records this beside its figures.

    with machine.Monitor(pid=server_pid) as mon:
        ...
    record["machine"] = mon.summary()
"""

from __future__ import annotations

import json
import os
import pathlib
import statistics
import threading
import time


def _cpu_times() -> tuple[float, float, float] | None:
    """(total, idle + iowait, steal) jiffies of all cores, or None."""
    try:
        with open("/proc/stat") as f:
            parts = f.readline().split()
    except OSError:
        return None
    if not parts or parts[0] != "cpu":
        return None
    v = [float(x) for x in parts[1:]]
    idle = v[3] + (v[4] if len(v) > 4 else 0.0)
    steal = v[7] if len(v) > 7 else 0.0
    return sum(v[:8]), idle, steal


def _proc_cpu(pid: int) -> float | None:
    """utime + stime of PID in seconds, or None."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (float(fields[11]) + float(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, IndexError, ValueError):
        return None


def snapshot() -> dict:
    """One-off: cores, load averages now."""
    try:
        la = os.getloadavg()
    except OSError:
        la = (None, None, None)
    return {"cpus": os.cpu_count(), "loadavg_1_5_15": la}


class Monitor:
    """Samples once every INTERVAL seconds in a daemon thread until stopped."""

    def __init__(self, pid: int | None = None, interval: float = 1.0):
        self.pid = pid
        self.interval = interval
        self.samples: list[dict] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._t0 = 0.0

    def __enter__(self) -> "Monitor":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(5)

    def _loop(self) -> None:
        prev = _cpu_times()
        prev_p = _proc_cpu(self.pid) if self.pid else None
        prev_t = time.monotonic()
        while not self._stop.wait(self.interval):
            now, now_t = _cpu_times(), time.monotonic()
            s = {"t": round(now_t - self._t0, 2), "loadavg1": os.getloadavg()[0]}
            if prev and now and now[0] > prev[0]:
                total = now[0] - prev[0]
                s["busy"] = round(1.0 - (now[1] - prev[1]) / total, 4)
                s["steal"] = round((now[2] - prev[2]) / total, 4)
            if self.pid:
                p = _proc_cpu(self.pid)
                if p is not None and prev_p is not None and now_t > prev_t:
                    s["proc_cpu"] = round((p - prev_p) / (now_t - prev_t), 4)
                prev_p = p
            self.samples.append(s)
            prev, prev_t = now, now_t

    def summary(self) -> dict:
        """cpus, samples, and mean / max of each series (busy and steal as shares of
        all cores; proc_cpu in cores)."""
        out: dict = {"cpus": os.cpu_count(), "samples": len(self.samples),
                     "interval_s": self.interval}
        for key in ("loadavg1", "busy", "steal", "proc_cpu"):
            vals = [s[key] for s in self.samples if key in s]
            if vals:
                out[key] = {"mean": round(statistics.fmean(vals), 4),
                            "max": round(max(vals), 4)}
        return out


# ---- a process's memory over time (allocator_rss.py, servers/redis_fates.py) ----

SMAPS_FIELDS = ("Rss", "Pss", "Anonymous", "AnonHugePages", "Private_Dirty")


def smaps_mappings(pid: int) -> list[dict]:
    """/proc/PID/smaps, one row per mapping: range, perms, name ("[anon]" when it has
    none), size_kib and SMAPS_FIELDS in KiB; [] when the process is gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/smaps").read_text()
    except OSError:
        return []
    rows, cur = [], None
    for line in text.splitlines():
        head = line.split()
        if head and "-" in head[0] and ":" not in head[0]:
            lo, hi = (int(x, 16) for x in head[0].split("-"))
            cur = {"range": head[0], "perms": head[1], "name": " ".join(head[5:]) or "[anon]",
                   "size_kib": (hi - lo) // 1024, **dict.fromkeys(SMAPS_FIELDS, 0)}
            rows.append(cur)
        elif cur is not None and head and head[0].rstrip(":") in SMAPS_FIELDS:
            cur[head[0].rstrip(":")] = int(head[1])
    return rows


# LLAMA's stats fields kept from each interval write (LIFETIME_ALLOC_STATS_INTERVAL)
STATS_SAMPLED = ("uptime_ns", "live_huge_pages", "committed_bytes", "held_free_pages",
                 "direct_bytes", "bytes_requested", "objects", "subreleased_bytes")


def llama_stats_path(pid: int) -> pathlib.Path | None:
    """The stats file the allocator in server PID writes.  `lifetime run` points
    LIFETIME_ALLOC_STATS at its own temporary directory (stats.%p.json) and copies the file
    to --stats only at exit; the launcher (the server's parent) carries that variable
    unaltered (Redis's setproctitle overwrites its own environment block), so read it
    there, then in the server's own."""
    try:
        ppid = int(pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
    for p in (ppid, pid):
        try:
            env = pathlib.Path(f"/proc/{p}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        for kv in env:
            if kv.startswith(b"LIFETIME_ALLOC_STATS="):
                value = kv.split(b"=", 1)[1].decode(errors="replace")
                return pathlib.Path(value.replace("%p", str(pid)))
    return None


def smaps_rollup_kib(pid: int, fields: tuple[str, ...]) -> dict | None:
    """FIELDS of /proc/PID/smaps_rollup in KiB (a field it lacks: absent); None: gone."""
    try:
        text = pathlib.Path(f"/proc/{pid}/smaps_rollup").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        name, _, rest = line.partition(":")
        if name in fields:
            out[name] = int(rest.split()[0])
    return out


HUGE = 2 << 20
DENSE_MAX_MISSING = 8  # as the allocator's collapse rule (allocator/src/backing.h)
_HIGH_BYTES = bytes(range(0x80, 0x100))


def dense_regions_kib(pid: int, max_missing: int = DENSE_MAX_MISSING) -> int | None:
    """KiB in the process's 2 MiB-aligned anonymous regions with at most MAX_MISSING of
    their 512 small pages not resident (/proc/PID/pagemap's present bits): where a huge
    page costs no RSS, so the denominator of "huge pages where they cost nothing" (issue
    32).  None when the process is gone or its pagemap cannot be read."""
    try:
        ranges = []
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                parts = line.split()
                if parts[1].startswith("rw") and parts[4] == "0" and len(parts) == 5:
                    lo, hi = (int(x, 16) for x in parts[0].split("-"))
                    if ranges and ranges[-1][1] == lo:  # adjacent mappings (split by madvise)
                        ranges[-1][1] = hi
                    else:
                        ranges.append([lo, hi])
        dense = 0
        with open(f"/proc/{pid}/pagemap", "rb") as pm:
            for lo, hi in ranges:
                a = (lo + HUGE - 1) & ~(HUGE - 1)
                n = (hi - a) // HUGE
                if n <= 0:
                    continue
                # One read per range, counted in C: this runs beside the program at every
                # sample, and a loop over each entry in Python took 49 ms a GiB of heap,
                # up to half a CPU of a 2-CPU machine at ten samples a second (more for
                # an allocator whose heap is unnamed mappings than for glibc's [heap],
                # which is not scanned).
                pm.seek((a >> 12) * 8)
                while n > 0:
                    chunk = min(n, 256)  # (1 MiB of pagemap a read)
                    data = pm.read(chunk * 512 * 8)
                    top = data[7::8]  # each entry's last byte: its top bit is bit 63, present
                    for k in range(len(top) // 512):
                        region = top[k * 512:(k + 1) * 512]
                        missing = len(region.translate(None, _HIGH_BYTES))  # bytes < 0x80
                        dense += missing <= max_missing
                    n -= chunk
        return dense * (HUGE >> 10)
    except (OSError, ValueError, IndexError):
        return None


class Sampler:
    """/proc/PID/smaps_rollup (kB fields) and utime+stime every INTERVAL s, in a thread;
    with LLAMA_STATS, also the allocator's stats file whenever it was rewritten (the
    allocator's interval writes), as stats_samples (STATS_SAMPLED fields; t: when this
    sampler saw it, at most INTERVAL s after the write)."""

    FIELDS = ("Rss", "Anonymous", "AnonHugePages")

    def __init__(self, pid: int, t0: float, interval: float, llama_stats: bool = False,
                 dense_regions: bool = False):
        self.pid, self.t0, self.interval = pid, t0, interval
        self.dense_regions = dense_regions  # also DenseRegions (kB): dense_regions_kib
        self.samples: list[dict] = []
        self.stats_samples: list[dict] = []
        self._llama_stats = llama_stats
        self._stats_path: pathlib.Path | None = None
        self._stats_mtime: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _read_llama_stats(self, t: float) -> None:
        if self._stats_path is None:
            self._stats_path = llama_stats_path(self.pid)
            if self._stats_path is None:
                return
        try:  # written to a temporary file and renamed: never seen half-written
            mtime = self._stats_path.stat().st_mtime_ns
            if mtime == self._stats_mtime:
                return
            data = json.loads(self._stats_path.read_text())
        except (OSError, ValueError):
            return
        self._stats_mtime = mtime
        if self.stats_samples and self.stats_samples[-1]["uptime_ns"] == data.get("uptime_ns"):
            return
        self.stats_samples.append({"t": t, **{k: data.get(k) for k in STATS_SAMPLED}})

    def sample(self) -> dict | None:
        rollup = smaps_rollup_kib(self.pid, self.FIELDS)
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            return None
        if rollup is None:
            return None
        s = {"t": round(time.monotonic() - self.t0, 3), **rollup}
        s["cpu_s"] = round((int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"), 2)
        if self.dense_regions:
            dense = dense_regions_kib(self.pid)
            if dense is not None:
                s["DenseRegions"] = dense
        self.samples.append(s)
        if self._llama_stats:
            self._read_llama_stats(s["t"])
        return s

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.sample() is None:
                return
            self._stop.wait(self.interval)

    def __enter__(self) -> "Sampler":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(5)


def time_mean(samples: list[dict], key: str, lo: float, hi: float) -> float | None:
    """Time-weighted mean of KEY over [LO, HI] (each sample holds until the next)."""
    pts = [(s["t"], s[key]) for s in samples if s.get(key) is not None]
    total = acc = 0.0
    for (t, v), nxt in zip(pts, pts[1:] + [(hi, None)]):
        a, b = max(t, lo), min(nxt[0], hi)
        if b > a:
            acc += v * (b - a)
            total += b - a
    return acc / total if total else None
