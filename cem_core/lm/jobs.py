"""One supervised background run of ``lm compare`` for the app: start, watch, stop.

The job lives in a subprocess with its own session, so page reruns (and even restarting the
app) do not touch it; ``runs/app/job.json`` records it. Only one job runs at a time. The data
choices are the demo corpus, SlimPajama streaming, or shard folders inside one configured data
directory (``CEM_LAB_DATA_DIR``, default ``data/``): the app never reads arbitrary paths.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from ..controls import _Controls
from ..model import VARIANTS
from ..records import atomic_write_text
from .data import find_shards
from .train import PRESETS, read_metrics

ROOT = Path(__file__).resolve().parents[2]
JOBS_DIR = ROOT / "runs" / "app"


def data_dir() -> Path:
    return Path(os.environ.get("CEM_LAB_DATA_DIR", ROOT / "data")).resolve()


def data_choices() -> list[str]:
    """'demo', 'slimpajama', and each folder of the data directory that holds shards."""
    root = data_dir()
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and find_shards(p)) if root.is_dir() else []
    return ["demo", "slimpajama", *folders]


@dataclass(frozen=True, kw_only=True)
class JobSpec(_Controls):
    """One ``lm compare`` run; round-trips through the URL like the other pages' controls."""

    SPECS = {"preset": ("choice", tuple(PRESETS)), "variants": ("choices", VARIANTS), "data": ("choice", ())}
    PREFIX = "lm_"

    preset: str = "cpu-tiny"
    variants: tuple = ("llama", "cem-full")
    data: str = "demo"

    @classmethod
    def specs(cls) -> dict:
        return cls.SPECS | {"data": ("choice", tuple(data_choices()))}   # the data folders present now

    def __post_init__(self) -> None:
        self._validate()

    def command(self, out: Path) -> list[str]:
        data = self.data if self.data in ("demo", "slimpajama") else str(data_dir() / self.data)
        return [sys.executable, "-m", "cem_core", "lm", "compare", "--preset", self.preset, "--data", data,
                "--variants", *self.variants, "--out", str(out), "--json", str(out / "compare.json")]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    try:   # a finished child we started is a zombie until reaped: reap it
        return os.waitpid(pid, os.WNOHANG) == (0, 0)
    except ChildProcessError:
        return True


def current() -> dict | None:
    """The last job's record (with 'running'), or None."""
    path = JOBS_DIR / "job.json"
    if not path.exists():
        return None
    job = json.loads(path.read_text())
    job["running"] = _alive(job["pid"])
    return job


def start(spec: JobSpec) -> dict:
    """Start a job; refused (ValueError) while another one runs."""
    job = current()
    if job and job["running"]:
        raise ValueError(f"a run is already going (started {job['started']}, pid {job['pid']}); "
                         "wait for it or stop it first")
    out = JOBS_DIR / time.strftime("%Y%m%d-%H%M%S")
    out.mkdir(parents=True, exist_ok=True)
    log = (out / "log.txt").open("w")
    proc = subprocess.Popen(spec.command(out), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    job = {"pid": proc.pid, "out": str(out), "spec": asdict(spec), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    atomic_write_text(JOBS_DIR / "job.json", json.dumps(job))
    return job | {"running": True}


def stop() -> None:
    job = current()
    if job and job["running"]:
        os.killpg(job["pid"], signal.SIGTERM)


def progress(job: dict) -> dict:
    """Per variant: its metrics so far; the final table when finished; the log's tail."""
    out = Path(job["out"])
    curves = {}
    for variant in job["spec"]["variants"]:
        if (out / variant / "metrics.jsonl").exists():
            curves[variant] = read_metrics(out / variant)
    table = json.loads((out / "compare.json").read_text()) if (out / "compare.json").exists() else None
    log = (out / "log.txt").read_text(errors="replace")[-3000:] if (out / "log.txt").exists() else ""
    return {"curves": curves, "table": table, "log": log}
