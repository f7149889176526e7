"""One supervised background run of ``lm compare`` for the app: start, watch, stop.

The job lives in a subprocess with its own session, so page reruns (and even restarting the
app) do not touch it; ``JOBS_DIR/job.json`` records it (the app keeps its jobs in ``runs/app``).
Only one job runs at a time, and a job start is atomic: the check and the spawn happen under the
lock of the jobs folder, so concurrent Starts (several tabs or users) make exactly one job.

A job record holds the process id together with a random token passed to the job in its
environment (``CEM_LAB_JOB_TOKEN``). The job counts as running only if a process with that id
exists and carries that token (its start time is recorded but not compared: psutil derives it
from the wall clock, and a clock step would make a running job look stale); Stop signals only
such a verified process. Each start keeps the folders of the last KEEP_JOBS jobs, removes older
ones (the folders it made, by their names, never anything else) and the temporary files a
stopped job left. A record whose id now belongs to another process is "stale", one
that cannot be read is "corrupt": the page reports either and clears it, so neither blocks a
new run.

The data choices are the demo corpus, SlimPajama streaming, or shard folders inside one data
directory (the app's: ``CEM_LAB_DATA_DIR``, default ``data/``): the app never reads a path that
resolves outside it (a symbolic link pointing elsewhere is refused).
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import psutil
import torch

from cem_core.experiments.integrity import TEMPORARY_MARK, FolderLock
from cem_core.experiments.lm.cost import run_seconds, seconds_per_step, train_flops_per_token
from cem_core.experiments.lm.run_folder import read_metrics
from cem_core.experiments.lm.shards import shard_files
from cem_core.experiments.lm.tokenizer import ByteTokenizer
from cem_core.experiments.lm.train_config import TRAIN_PRESETS, LMTrainConfig
from cem_core.experiments.records import atomic_write_text
from cem_core.nn.model import VARIANTS

from .controls import Controls

TOKEN_ENV = "CEM_LAB_JOB_TOKEN"
KEEP_JOBS = 8              # the finished or stopped jobs' folders kept; a new start removes the oldest beyond them
JOB_FOLDER = re.compile(r"\d{8}-\d{6}-[0-9a-f]{6}")     # the folders start() makes: only those are ever removed
JOB_FIELDS = {"pid": int, "create_time": float, "token": str, "out": str, "spec": dict, "started": str}
DATA_SOURCES = ("demo", "prose", "slimpajama")   # the choices that are not folders
TABLE_FIELDS = {"variant", "params", "tokens_per_s", "val_ppl", "sample"}   # the page's columns of compare.json
JOB_THREADS = max(1, (os.cpu_count() or 1) // 2)
"""The torch threads of a job, and of the timed steps that estimate it: half the cores, so that the app's server
and the browser keep the rest. With a thread per core, anything else running makes the threads wait for each
other: on 2 cores beside one busy process, cpu-tiny trained at 1,400 tokens/s on 2 threads and 16,800 on 1 (an
estimate timed on the app's one thread said 3 minutes, and the run then took 6 to 11)."""
GUESS_STEPS, GUESS_WARMUP = 5, 2                           # the timed steps of a first guess
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS")        # read by torch when the job's process starts


def job_env(**extra: str) -> dict:
    """The environment of a job's process and of its first guess's: this one, on JOB_THREADS torch threads."""
    return {**os.environ, **extra, **dict.fromkeys(THREAD_ENV, str(JOB_THREADS))}


@dataclass(frozen=True, kw_only=True)
class JobSpec(Controls):
    """One ``lm compare`` run; round-trips through the URL like the other pages' controls. `data`
    is a source or the name of a shard folder (the board checks that the folder is there)."""

    SPECS = {"preset": ("choice", tuple(TRAIN_PRESETS)), "variants": ("choices", VARIANTS), "data": ("name", None)}
    PREFIX = "lm_"

    preset: str = "cpu-tiny"
    variants: tuple = ("llama", "cem-full")
    data: str = "demo"

    def __post_init__(self) -> None:
        self._validate()


@dataclass(frozen=True, kw_only=True)
class JobBoard:
    """The app's background jobs: their records under `jobs_dir`, the shard folders of `data_dir`
    (the only data the app reads), and `workdir`, where job processes start."""

    jobs_dir: Path
    data_dir: Path
    workdir: Path

    # -- data ------------------------------------------------------------------------------------

    def data_folder(self, name: str) -> Path:
        """The shard folder `name` of the data directory; ValueError if it, or a shard that a run on it
        reads (its train/ and validation/ included), resolves outside the data directory, or if it holds
        no shards or cannot be read."""
        root = self.data_dir.resolve()
        folder = root / name
        if Path(name).name != name or name in ("", ".", "..") or _outside(folder, root):
            raise ValueError(f"data={name!r} is invalid: it resolves outside the data folder {root}")
        if not folder.is_dir():
            raise ValueError(f"data={name!r} is invalid: {folder} is not a folder")
        try:
            shards = shard_files(folder)
        except ValueError as err:               # no shards, or a subfolder that cannot be read
            reason = str(err).split(" is invalid: ", 1)[-1]          # "holds no ... files", "cannot be read: ..."
            raise ValueError(f"data={name!r} is invalid: the folder {reason}") from None
        escaping = [p.relative_to(folder).as_posix() for p in shards if _outside(p, root)]
        if escaping:
            raise ValueError(f"data={name!r} is invalid: {', '.join(escaping[:3])} resolve(s) outside the data "
                             f"folder {root} (a symbolic link pointing elsewhere is never read)")
        return folder.resolve()

    def data_choices(self) -> list[str]:
        """'demo', 'prose', 'slimpajama', and each folder of the data directory that holds shards, all of
        them inside the data directory."""
        return self.data_entries()[0]

    def data_entries(self) -> tuple[list[str], list[str]]:
        """The data choices, and a line for each entry of the data directory that is not offered, with its
        reason (a folder that cannot be read, a link pointing outside, no shards), or for the directory itself."""
        try:
            entries = sorted(self.data_dir.iterdir()) if self.data_dir.is_dir() else []
        except OSError as err:
            return [*DATA_SOURCES], [f"the data folder {self.data_dir} cannot be read ({err.strerror or err})"]
        names, skipped = [*DATA_SOURCES], []
        for entry in entries:
            try:
                self.data_folder(entry.name)
            except (OSError, ValueError) as err:      # one bad entry is left out, never the whole page
                if entry.is_dir():
                    skipped.append(f"{entry.name} ({str(err).removeprefix(f'data={entry.name!r} is invalid: ')})")
                continue
            names.append(entry.name)
        return names, skipped

    def command(self, spec: JobSpec, out: Path) -> list[str]:
        """The ``lm compare`` command line of a job (ValueError for a data folder that is not usable)."""
        data = spec.data if spec.data in DATA_SOURCES else str(self.data_folder(spec.data))
        return [sys.executable, "-m", "cem_core", "lm", "compare", "--preset", spec.preset, "--data", data,
                "--variants", *spec.variants, "--out", str(out), "--json", str(out / "compare.json")]

    # -- the job record and its process --------------------------------------------------------

    @property
    def record_path(self) -> Path:
        return self.jobs_dir / "job.json"

    def current(self) -> dict | None:
        """The last job's record with 'status' ('running', 'ended', 'stale' or 'corrupt') and
        'running', or None when there is none. A corrupt record comes back with 'problem'."""
        path = self.record_path
        if not path.exists():
            return None
        try:
            job = json.loads(path.read_text())
        except (OSError, ValueError) as err:
            return {"status": "corrupt", "running": False, "problem": f"{path} is not valid JSON ({err})"}
        problem = _job_problem(job)
        if problem:
            return {"status": "corrupt", "running": False, "problem": f"{path} is not a job record: {problem}"}
        status = _status(job)
        return job | {"status": status, "running": status == "running"}

    def _start_lock(self) -> FolderLock:
        return FolderLock(self.jobs_dir, "job start", timeout=30)

    def clear(self) -> None:
        """Forget a stale or corrupt job record (a verified running job is never cleared)."""
        with self._start_lock():                  # not while another session starts a job
            job = self.current()
            if job is not None and not job["running"]:
                self.record_path.unlink(missing_ok=True)

    def start(self, spec: JobSpec, step_seconds: dict | None = None) -> dict:
        """Start a job; refused (ValueError) while another one runs. Check and spawn are atomic. The job runs on
        JOB_THREADS torch threads; `step_seconds` (variant: seconds a step, the page's first guess) is kept in the
        record, and the progress scales the measured speed to the later variants by its ratios."""
        with self._start_lock():
            job = self.current()
            if job and job["running"]:
                raise ValueError(f"a run is already going (started {job['started']}, pid {job['pid']}); "
                                 "wait for it or stop it first")
            token = secrets.token_hex(16)
            out = self.jobs_dir / f"{time.strftime('%Y%m%d-%H%M%S')}-{token[:6]}"
            command = self.command(spec, out)
            out.mkdir(parents=True)
            with (out / "log.txt").open("w") as log:
                proc = subprocess.Popen(command, cwd=self.workdir, stdout=log, stderr=subprocess.STDOUT,
                                        start_new_session=True, env=job_env(**{TOKEN_ENV: token}))
            job = {"pid": proc.pid, "create_time": psutil.Process(proc.pid).create_time(), "token": token,
                   "out": str(out), "spec": asdict(spec), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
            if step_seconds:
                job["step_seconds"] = {v: float(step_seconds[v]) for v in spec.variants}
            atomic_write_text(self.record_path, json.dumps(job))
            self._tidy(keep=out)
        return job | {"status": "running", "running": True}

    def _tidy(self, keep: Path) -> None:
        """Remove the job folders beyond the newest KEEP_JOBS (``keep``, the new job's, among them) and, in those
        kept, the temporary files a stop left behind (``TEMPORARY_MARK``: a checkpoint being written)."""
        folders = sorted((f for f in self.jobs_dir.iterdir() if JOB_FOLDER.fullmatch(f.name) and f.is_dir()
                          and not f.is_symlink()), reverse=True)
        for old in folders[KEEP_JOBS:]:
            if old != keep:
                shutil.rmtree(old, ignore_errors=True)
        for folder in folders[:KEEP_JOBS]:
            if folder != keep:
                for tmp in folder.rglob(f"*{TEMPORARY_MARK}*"):
                    if tmp.is_file() and not tmp.is_symlink():
                        tmp.unlink(missing_ok=True)

    def stop(self) -> None:
        """SIGTERM to the job's process group, only if the recorded process is verified to be the job."""
        job = self.current()
        if job and job["running"]:
            os.killpg(job["pid"], signal.SIGTERM)

    def live_training_lock(self) -> FolderLock:
        """The lock that lets one live training (the GP page's) run at a time across all sessions."""
        return FolderLock(self.jobs_dir / "live-training", "live training")


def _outside(path: Path, root: Path) -> bool:
    return not Path(os.path.realpath(path)).is_relative_to(root)      # a link loop is not an error here


def _job_problem(job) -> str | None:
    if not isinstance(job, dict):
        return "it is not a JSON object"
    for name, kind in JOB_FIELDS.items():
        if not isinstance(job.get(name), kind) or isinstance(job.get(name), bool):
            return f"its field {name!r} is missing or not a {kind.__name__}"
    return None


def _status(job: dict) -> str:
    """'running' (the recorded process, verified), 'ended', or 'stale' (the id is another process's)."""
    try:
        process = psutil.Process(job["pid"])
        if process.status() == psutil.STATUS_ZOMBIE:
            _reap(job["pid"])
            return "ended"
        same = process.environ().get(TOKEN_ENV) == job["token"]          # the proof: a random token it was given
    except psutil.NoSuchProcess:
        return "ended"
    except psutil.AccessDenied:        # another user's process: not ours
        same = False
    return "running" if same else "stale"


def _reap(pid: int) -> None:
    """A finished child of this process stays a zombie until waited for."""
    try:
        os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        pass


def progress(job: dict) -> dict:
    """Per variant: its metrics so far; the final table when finished; the log's tail; where the run
    stands (``standing``); and ``problems``, a line for each file that cannot be read (a metrics file damaged
    while the page watches it, say), whose part is left out while the rest is shown."""
    out = Path(job["out"])
    curves, problems = {}, []
    for variant in job["spec"]["variants"]:
        try:
            if (out / variant / "metrics.jsonl").exists():
                curves[variant] = read_metrics(out / variant)
        except (OSError, ValueError) as err:
            problems.append(f"{variant}: {err}")
    table = None
    try:
        if (out / "compare.json").exists():
            table = json.loads((out / "compare.json").read_text())
    except (OSError, ValueError) as err:
        problems.append(f"{out / 'compare.json'} cannot be read ({err})")
    if table is not None and not (isinstance(table, list) and all(isinstance(r, dict) and TABLE_FIELDS <= set(r)
                                                                  for r in table)):
        problems.append(f"{out / 'compare.json'} is not a comparison table (rows with {', '.join(TABLE_FIELDS)})")
        table = None
    log = (out / "log.txt").read_text(errors="replace")[-3000:] if (out / "log.txt").exists() else ""
    guess = job.get("step_seconds")
    if not (isinstance(guess, dict) and all(isinstance(guess.get(v), (int, float)) and guess[v] > 0
                                            for v in job["spec"]["variants"])):
        guess = None                                     # a record from before the guesses were kept, or damaged
    return {"curves": curves, "table": table, "log": log, "standing": standing(job["spec"], curves, guess),
            "step_seconds": guess, "problems": problems}


GUESS_SCRIPT = "import sys; from cem_core.ui.jobs import time_steps; time_steps(sys.argv[1], sys.argv[2:])"
GUESS_TIMEOUT = 300                                        # seconds the child timing the steps may take


def first_guess(preset: str, variants: tuple[str, ...], cwd=None) -> dict[str, float]:
    """Seconds one step of each variant at `preset` takes here now (variant: seconds), timed as the job will run:
    in a process of its own on JOB_THREADS threads (``time_steps``), started in `cwd` (the board's workdir, where
    cem_core is importable however the app was started). The app's server never holds a training
    step's memory: timed in the server, the two default variants left it 300 MB larger for good (what the
    allocator keeps), the largest part of the LM page's cold load."""
    try:
        done = subprocess.run([sys.executable, "-c", GUESS_SCRIPT, preset, *variants], capture_output=True, text=True,
                              timeout=GUESS_TIMEOUT, env=job_env(), cwd=cwd)
    except subprocess.TimeoutExpired:
        raise ValueError(f"the first guess took more than {GUESS_TIMEOUT} s to time: the machine is very busy; "
                         "try again later") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no message"])[-1]
        raise ValueError(f"the first guess could not be timed ({last})")
    measured = json.loads(done.stdout.splitlines()[-1])
    return {v: measured["seconds"][v] for v in variants}


def time_steps(preset: str, variants: list[str]) -> None:
    """(In the child of ``first_guess``.) Print, as JSON, the seconds a step of each variant takes (the median of
    GUESS_STEPS timed steps after GUESS_WARMUP untimed ones: a run's first steps are up to 3 times slower than its
    later ones) and the torch threads they were timed on."""
    torch.set_num_threads(JOB_THREADS)
    seconds = {v: seconds_per_step(LMTrainConfig.from_preset(preset, variant=v), GUESS_STEPS, warmup=GUESS_WARMUP)
               for v in variants}
    print(json.dumps({"seconds": seconds, "threads": torch.get_num_threads()}))


def plan(spec: dict, step_seconds: dict) -> dict:
    """Seconds each variant's run takes at `step_seconds` (variant: seconds a training step): its steps and its
    evaluations. Before the start it is the page's estimate; during the run ``standing`` uses it for what is
    left, with the measured step time."""
    return {v: run_seconds(LMTrainConfig.from_preset(spec["preset"], variant=v), step_seconds[v])
            for v in spec["variants"]}


def elapsed(cfg: LMTrainConfig, record: dict) -> float:
    """Seconds of training behind a metrics record (its tokens_per_s is the average since the run's first step,
    evaluations included)."""
    return record["step"] * cfg.batch_size * cfg.seq_len / record["tokens_per_s"]


def standing(spec: dict, curves: dict, step_seconds: dict | None = None) -> dict | None:
    """Where a run stands, from its metrics: the variant being trained (its index among the run's), its step
    and its preset's steps, its measured tokens/s, the seconds of training so far (``seconds_done``) and the
    seconds left for it and the variants after it (each with its evaluations), by ``plan`` at the measured step
    time. A later variant's step time is the measured one scaled by the ratio of the first guesses'
    (`step_seconds`, variant: seconds a step) or, without them, of the training FLOPs per token. None before
    the first step is recorded."""
    variants = spec["variants"]
    started = [v for v in variants if curves.get(v)]
    if not started:
        return None
    variant = started[-1]
    last = curves[variant][-1]
    configs = {v: LMTrainConfig.from_preset(spec["preset"], variant=v) for v in variants}
    if step_seconds is None:                                           # relative costs: FLOPs per step
        step_seconds = {v: c.batch_size * c.seq_len
                        * train_flops_per_token(c.model_config(ByteTokenizer.vocab_size), c.seq_len, c.batch_size)
                        for v, c in configs.items()}
    cfg, step = configs[variant], last["step"]
    before = step + (step - 1) // cfg.eval_every * cfg.eval_batches / 3      # in steps: the evaluations before it
    measured = elapsed(cfg, last) / before                                    # seconds a training step, now
    planned = plan(spec, {v: measured * step_seconds[v] / step_seconds[variant] for v in variants})
    later = variants[variants.index(variant) + 1:]
    left = planned[variant] - measured * before + sum(planned[v] for v in later)
    done = sum(elapsed(configs[v], curves[v][-1]) for v in started)
    return {"variant": variant, "index": variants.index(variant), "of": len(variants), "step": step,
            "steps": cfg.steps, "tokens_per_s": last["tokens_per_s"], "seconds_left": max(0.0, left),
            "seconds_done": done}


def duration(seconds: float) -> str:
    """12 s, 3 min 20 s, 1 h 05 min."""
    seconds = round(seconds)
    if seconds < 60:
        return f"{max(seconds, 1)} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
