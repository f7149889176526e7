"""The whole-shard check a run makes before it trains, and the cache of its checksums between runs.

Every shard is read whole first (`check_shards`; each file once, its checksum kept in `shard_cache_file()`
while the file's size, modification and change times and inode stay; a progress bar after two seconds).
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from cem_core.experiments.records import atomic_write_text
from cem_core.nn.validate import fail

from .shard_reader import sha256_read_whole

PROGRESS_DELAY = 2.0            # seconds of checking shards whole before a progress bar shows


def check_shards(files: list[Path]) -> dict[Path, dict]:
    """{file: {"bytes": n, "sha256": hex}} of each shard, read to its end first: a .zst is decompressed whole
    (every frame to its end, its checksum verified where the frame has one), so a truncated or corrupt shard is
    a ValueError naming the file however few documents a run needs. Each file is read once: its result is kept
    in the shard cache (`shard_cache_file`) by resolved path while the file's stamp stays: its size, inode and
    modification and change times. The change time is the one a user cannot set (``touch -d`` sets the others),
    so a shard rewritten in place with its size and modification time put back is read again. Shards read
    take a progress bar on stderr once they take more than two seconds."""
    cache = _read_shard_cache()
    found, stamps, keys = {}, {}, {}
    for file in files:
        try:
            st = file.stat()
        except OSError as err:
            fail("path", str(file), f"cannot be read ({err.strerror or err})")
        stamps[file] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns,
                        "inode": [st.st_dev, st.st_ino]}
        keys[file] = str(file.resolve())
        entry = cache.get(keys[file])
        if (isinstance(entry, dict) and {k: entry.get(k) for k in stamps[file]} == stamps[file]
                and isinstance(entry.get("sha256"), str)):
            found[file] = {"bytes": entry["size"], "sha256": entry["sha256"]}
    if todo := [file for file in files if file not in found]:
        from tqdm import tqdm

        with tqdm(total=sum(stamps[f]["size"] for f in todo), unit="B", unit_scale=True, delay=PROGRESS_DELAY,
                  desc=f"checking {len(todo)} shard(s) whole", file=sys.stderr) as bar:
            for file in todo:
                cache[keys[file]] = stamps[file] | {"sha256": sha256_read_whole(file, bar.update)}
                found[file] = {"bytes": stamps[file]["size"], "sha256": cache[keys[file]]["sha256"]}
        _write_shard_cache(cache)
    return {file: found[file] for file in files}


def shard_cache_file() -> Path:
    """Where the shards' checksums are kept between runs: $CEM_LAB_CACHE_DIR/shards.json, by default
    ~/.cache/cem-lab/shards.json (XDG_CACHE_HOME respected)."""
    base = os.environ.get("CEM_LAB_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache",
                                                        "cem-lab")
    return Path(base) / "shards.json"


def _read_shard_cache() -> dict:
    try:
        cache = json.loads(shard_cache_file().read_text())
    except (OSError, ValueError):             # none yet, or damaged: every shard is read again
        return {}
    return cache if isinstance(cache, dict) else {}


def _write_shard_cache(cache: dict) -> None:
    try:
        shard_cache_file().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(shard_cache_file(), json.dumps(cache))
    except OSError:                           # a read-only home: the next run reads the shards again
        pass
