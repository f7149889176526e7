"""A class on one server: N simulated students use the energy page at once; the server's peak memory, the time to
a rendered page and the errors are measured. `streamlit run app.py` as `make app` runs it (MALLOC_ARENA_MAX=2), a
fresh server for each N, with Streamlit's agent API on (`server.enableAgentApi`, for this benchmark only): each
student is an HTTP client on 127.0.0.1 that drives a session of its own through `POST /_stcore/agent/interact`,
which takes the browser's own rerun path and answers once the page's script has finished, with the page's
elements. So a student costs the server what a browser tab costs it, and nothing of the 2 cores goes to drawing
thirty pages (a class's browsers run on the students' machines).

    .venv/bin/python benchmarks/app_load.py [--students 1 10 30] [--timeout 180] [--lm-loads 10]

Each student, all of them at the same moment, walks the energy page as a class does at the lecturer's word:
  1. "shared": opens the link the lecturer gave (the defaults with seed 777: the same state for everyone);
  2. "distinct": opens a link of their own in the same session (seed 1000 + their number: a state nobody else
     asks for);
  3. "move": moves the "steps T" slider twice, one step each (two new states of their own);
  4. "large shared": opens the heavy link of the issue in a new session, the same for everyone (a block, 8 heads,
     width 96, sequence 256, T 16: about 72 MB of computed state).
A step's time runs from the request to the rendered page (the script finished, the elements sent). An error is a
refused or timed-out request, or an exception or error box on the page. The server computes at most
`cem_core.ui.cache.COMPUTE_SLOTS` new states at a time; a session waiting for a slot is shown "busy, retrying"
(`app_pages.common.busy_note`) until its computation starts, so no finished page holds the note. The server's
resident memory is read every 0.1 s (psutil) and its peak printed.

Then, on a fresh server, --lm-loads sessions open the language-model page one after another (cold loads: each a
new session), and the server's memory is printed before the first, after the first and after the last: the page
costs what it needs once (the libraries, the committed records, its figures), not once a session.

Targets on 2 cores: at N = 30, peak memory at most 1.5 GB and no error; the p95 time of steps 1-3 (the
defaults-sized states) stated and at most 10 s. The one-minute load average before each N is printed beside it: a
measurement taken beside other work says so.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from appdriver import serve_app  # noqa: E402  (tests/ is not a package)

SHARED = {"seed": ["777"]}
LARGE = {"layer": ["block"], "heads": ["8"], "width": ["96"], "seq_len": ["256"], "T": ["16"], "seed": ["4242"]}
PROBLEMS = ("exception", "error")                   # the element types of a failure shown on the page
TARGET_MB, TARGET_P95 = 1536, 10.0


class Peak:
    """The largest resident memory of a process, read every `every` seconds in a thread until stopped."""

    def __init__(self, pid: int, every: float = 0.1):
        self.process, self.every, self.mb = psutil.Process(pid), every, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.mb = max(self.mb, self.process.memory_info().rss / 2 ** 20)
            time.sleep(self.every)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.mb


def nodes(tree):
    """Every element of a page's tree."""
    yield tree
    for child in tree.get("children") or []:
        yield from nodes(child)


class Student:
    """One student: their steps' times and their errors."""

    def __init__(self, number: int, url: str, timeout: float):
        self.number, self.url, self.timeout = number, url, timeout
        self.times: dict[str, list[float]] = {}
        self.errors: list[str] = []

    def interact(self, name: str, request: dict) -> dict | None:
        """One request, timed; the page it returns (None when it failed, counted as an error)."""
        start = time.perf_counter()
        body = json.dumps(request).encode()
        call = urllib.request.Request(f"{self.url}/_stcore/agent/interact", data=body, method="POST",
                                      headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(call, timeout=self.timeout) as answer:
                page = json.loads(answer.read())
        except (OSError, ValueError) as err:          # refused, timed out, an HTTP error, not JSON
            detail = err.read()[:200].decode(errors="replace") if isinstance(err, urllib.error.HTTPError) else ""
            self.errors.append(f"student {self.number}, {name}: {type(err).__name__}: {err} {detail}")
            return None
        self.times.setdefault(name, []).append(time.perf_counter() - start)
        elements = list(nodes(page["tree"]))
        if page.get("status") != "ready" or any(e.get("type") in PROBLEMS for e in elements):
            shown = [json.dumps(e)[:200] for e in elements if e.get("type") in PROBLEMS]
            self.errors.append(f"student {self.number}, {name}: status {page.get('status')} {shown[:1]}")
        return page

    def walk(self) -> None:
        page = self.interact("shared", {"query_params": SHARED})
        if page is None:
            return
        session = page["session_id"]
        page = self.interact("distinct", {"session_id": session, "query_params": {"seed": [str(1000 + self.number)]}})
        for _ in range(2):
            if page is None:
                return
            T = next(e["value"] for e in nodes(page["tree"]) if e.get("key") == "en_T")
            page = self.interact("move", {"session_id": session, "widget_state": {"en_T": T + 1}})
        self.interact("large shared", {"query_params": LARGE})


def server_env(timeout: float) -> dict:
    """The server's environment: as `make app` runs it (MALLOC_ARENA_MAX=2), with the agent API on."""
    return {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"} | {
        "MALLOC_ARENA_MAX": "2", "STREAMLIT_SERVER_ENABLE_AGENT_API": "true",
        "STREAMLIT_SERVER_AGENT_WAIT_TIMEOUT": str(int(timeout))}


def p95(values: list[float]) -> float:
    """The 95th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, -(-95 * len(ordered) // 100) - 1)]


def measure(n: int, timeout: float) -> dict:
    env = server_env(timeout)
    load = os.getloadavg()[0]
    with serve_app(env) as server:
        peak = Peak(server.proc.pid)
        students = [Student(i, server.url, timeout) for i in range(n)]
        start = time.perf_counter()
        with ThreadPoolExecutor(n) as pool:
            list(pool.map(Student.walk, students))
        seconds = time.perf_counter() - start
        peak_mb = peak.stop()
    small = [t for s in students for name in ("shared", "distinct", "move") for t in s.times.get(name, [])]
    large = [t for s in students for t in s.times.get("large shared", [])]
    return {"n": n, "load": load, "peak_mb": peak_mb, "steps": len(small),
            "p50": statistics.median(small) if small else float("nan"), "p95": p95(small) if small else float("nan"),
            "large_p50": statistics.median(large) if large else float("nan"), "large_max": max(large, default=0.0),
            "errors": [e for s in students for e in s.errors], "seconds": seconds}


def lm_loads(n: int, timeout: float) -> list[float]:
    """The server's memory (MB) before any session, then after each of `n` cold loads of the LM page."""
    env = server_env(timeout)
    with serve_app(env) as server:
        process = psutil.Process(server.proc.pid)
        sizes = [process.memory_info().rss / 2 ** 20]
        for i in range(n):
            student = Student(i, server.url, timeout)
            if student.interact("lm page", {"page": "lm"}) is None:
                raise SystemExit(f"the LM page failed: {student.errors[0]}")
            sizes.append(process.memory_info().rss / 2 ** 20)
    return sizes


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, nargs="+", default=[1, 10, 30], help="class sizes (default 1 10 30)")
    parser.add_argument("--timeout", type=float, default=180, help="seconds a request may take before it is an error")
    parser.add_argument("--lm-loads", type=int, default=10, help="cold loads of the LM page (default 10; 0: none)")
    args = parser.parse_args(argv)
    rows = []
    for n in args.students:
        row = measure(n, args.timeout)
        rows.append(row)
        print(f"N = {n}: load {row['load']:.1f}, peak {row['peak_mb']:,.0f} MB, steps 1-3 p50 {row['p50']:.2f} s, "
              f"p95 {row['p95']:.2f} s ({row['steps']} steps), large shared link p50 {row['large_p50']:.1f} s "
              f"(max {row['large_max']:.1f} s), {len(row['errors'])} errors, "
              f"{row['seconds']:.0f} s in all", flush=True)
        for error in row["errors"][:5]:
            print(f"  {error}")
    print(f"\nmachine: {os.cpu_count()} cores\n")
    print("| students | load (1 min) | server peak | steps 1-3: p50 | p95 | large shared link: p50 | max | errors |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['n']} | {r['load']:.1f} | {r['peak_mb']:,.0f} MB | {r['p50']:.2f} s | {r['p95']:.2f} s | "
              f"{r['large_p50']:.1f} s | {r['large_max']:.1f} s | {len(r['errors'])} |")
    if args.lm_loads:
        sizes = lm_loads(args.lm_loads, args.timeout)
        print(f"\nthe LM page, {args.lm_loads} cold loads one after another: the server {sizes[0]:,.0f} MB before, "
              f"{sizes[1]:,.0f} MB after the first, {sizes[-1]:,.0f} MB after the last "
              f"({(sizes[-1] - sizes[1]) / max(1, args.lm_loads - 1):.1f} MB a load after the first)")
    last = rows[-1]
    verdict = ("PASS" if last["peak_mb"] <= TARGET_MB and not last["errors"] and last["p95"] <= TARGET_P95
               else "MISS")
    print(f"\nat N = {last['n']}: peak {last['peak_mb']:,.0f} MB (target <= {TARGET_MB:,}), p95 {last['p95']:.2f} s "
          f"(target <= {TARGET_P95:.0f} s), {len(last['errors'])} errors (target 0): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
