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

import os
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
