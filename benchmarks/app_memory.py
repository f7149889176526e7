"""The app server's memory as distinct large states arrive: `streamlit run app.py` and Debian's headless
Chromium (through Playwright and tests/appdriver.py) open --states distinct links of the largest energy
page (a block, 8 heads, sequence 256, T 16, width 64: the attention weights of 16 steps x 8 heads x 256 x 256
tokens and their figures, about 72 MB of computed state each; seeds 0, 1, ...), one fresh page each, and
the server's resident memory is read after every one (psutil, the server process).

    .venv/bin/python benchmarks/app_memory.py [--states 16]

The energy page keeps computed states in a cache bounded in bytes (app_pages/energy.py, CACHE_BYTES); an
entry cache of 64 states used to grow the server from 625 MB to 1.89 GB over 16 such links. The server runs
as `make app` runs it, with glibc's MALLOC_ARENA_MAX=2 (each of the server's threads would otherwise get a
malloc arena of its own, and freed memory scattered over them stays with the process); --arenas N sets another
value, 0 leaves glibc's default. Target: the server under 1 GB after every state. Prints the resident memory
after each state, the largest, and PASS or MISS.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
from appdriver import chromium, serve_app, settle  # noqa: E402  (tests/ is not a package)

LARGEST = "layer=block&heads=8&seq_len=256&T=16&width=64"
TARGET_MB = 1024


def resident_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 2 ** 20


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--states", type=int, default=16, help="distinct largest states to open (default 16)")
    parser.add_argument("--arenas", type=int, default=2, help="MALLOC_ARENA_MAX for the server (default 2, as make "
                        "app; 0: glibc's default)")
    args = parser.parse_args(argv)
    env = {k: v for k, v in os.environ.items() if k != "MALLOC_ARENA_MAX"}
    if args.arenas:
        env["MALLOC_ARENA_MAX"] = str(args.arenas)
    largest = 0.0
    with serve_app(env) as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1280, "height": 720})
        page.goto(server.url)
        settle(page)
        page.close()
        print(f"server after the default page: {resident_mb(server.proc.pid):,.0f} MB")
        for seed in range(args.states):
            page = browser.new_page(viewport={"width": 1280, "height": 720})
            page.goto(f"{server.url}/?{LARGEST}&seed={seed}")
            settle(page, timeout=180000)
            page.close()
            now = resident_mb(server.proc.pid)
            largest = max(largest, now)
            print(f"state {seed + 1:2d} (seed {seed}): {now:,.0f} MB", flush=True)
    verdict = "PASS" if largest < TARGET_MB else "MISS"
    print(f"MALLOC_ARENA_MAX={env.get('MALLOC_ARENA_MAX', 'glibc default')}: after {args.states} distinct largest "
          f"states {now:,.0f} MB, at most {largest:,.0f} MB (target < {TARGET_MB:,} MB): {verdict}")
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main())
