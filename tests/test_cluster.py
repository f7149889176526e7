"""Sweeps beyond one machine (cem_core/experiments/cluster.py): the same runner, its runs handed to submitit, whose
local mode runs each job in a subprocess of this machine (the code path of SLURM short of the scheduler)."""
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest
from conftest import ROOT, tiny_study_specs

from cem_core.experiments import cluster, sweep
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.pool import finished

# how long a run took: the one field two machines may not share (and the checksums, which cover it)
TIMING = ("train_seconds", "checksums")


def _without_timing(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k not in TIMING} for r in records]


@pytest.mark.slow                      # two small sweeps, one through submitit's job subprocesses
def test_the_same_sweep_through_the_local_pool_and_submitit_local_gives_identical_records(tmp_path):
    """Four runs of the factor study's base condition, shrunk, with two workers: once through the local worker
    pool, once as submitit jobs. The records are the same to the last digit (timing aside), in the same order,
    and the submitit folder holds the sweep's files and the jobs' logs, nothing else."""
    specs = tiny_study_specs(["base"], seeds=(0, 1))[:4]
    pool_records = gp_sweep.run_gp_sweep(tmp_path / "pool", specs, jobs=2)
    engine = cluster.executor("submitit-local", tmp_path / "jobs" / cluster.LOGS, poll=0.1)
    job_records = gp_sweep.run_gp_sweep(tmp_path / "jobs", specs, jobs=2, executor=engine)
    assert len(pool_records) == 4 and [r["hash"] for r in job_records] == [s.hash for s in specs]
    assert _without_timing(job_records) == _without_timing(pool_records)
    assert _without_timing(gp_sweep.GP_SWEEP.load(tmp_path / "jobs" / "results.json")) == _without_timing(pool_records)
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == sorted(
        [".lock", "cluster-logs", "results.csv", "results.json", "sweep.json"])
    assert any((tmp_path / "jobs" / cluster.LOGS).rglob("*_log.out"))        # each job's log is kept
    # resumed through the engine: nothing left to run, nothing submitted
    assert gp_sweep.run_gp_sweep(tmp_path / "jobs", specs, jobs=2, executor=engine) == job_records


@pytest.mark.slow
def test_a_job_that_fails_ends_the_sweep_with_its_error_and_its_log(tmp_path):
    """int('x') raises in the job's subprocess: the executor yields the runs that finished and then a ValueError
    that names the job's error and its log file, never submitit's traceback."""
    runs = cluster.executor("submitit-local", tmp_path, poll=0.05)(int, ["1", "x"], 1)
    assert next(runs) == 1
    with pytest.raises(ValueError, match=r"^cluster job \S+ failed \(ValueError: invalid literal for int\(\) with base "
                                         r"10: 'x'\); its log: \S+_log.err; the runs that finished") as err:
        next(runs)
    assert str(tmp_path) in str(err.value)


@pytest.mark.slow
def test_closing_the_sweep_cancels_the_jobs_still_running(tmp_path):
    """A sweep that stops (Ctrl-C, an error, the caller closing the generator) leaves no job behind: with two
    slots, a 60-second job still runs when the first finishes; closing the generator ends its processes. Here
    SIGINT is ignored, as in a sweep started in the background (nohup, `&`), whose jobs inherit that: submitit
    asks a local job to stop with SIGINT alone, so the executor must end what outlives it."""
    me = psutil.Process()
    others = {c.pid for c in me.children(recursive=True)}     # such as multiprocessing's resource tracker
    before = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        runs = cluster.executor("submitit-local", tmp_path, poll=0.05)(time.sleep, [0.1, 60, 60], 2)
        assert next(runs) is None                              # the 0.1 s job; a 60 s one runs, one waits
    finally:
        signal.signal(signal.SIGINT, before)
    jobs = [c for c in me.children(recursive=True) if c.pid not in others]
    assert len(jobs) == 2                                      # the job's controller and its task
    runs.close()
    deadline = time.monotonic() + 30
    while alive := [c for c in jobs if c.is_running() and c.status() != psutil.STATUS_ZOMBIE]:
        assert time.monotonic() < deadline, f"a cancelled job's processes still run: {alive}"
        time.sleep(0.2)


@pytest.mark.slow                      # trains a run
def test_a_record_a_worker_hands_back_is_checked_before_it_is_saved(tmp_path):
    """The runner's rule for every executor: a record that is not sound (here: a bare dict with a hash, as a job
    of another version might return), or that is not a run still to do, ends the sweep and is not saved."""
    spec = tiny_study_specs(["base"], seeds=(0,))[0]
    plan = sweep.Plan(specs=[{"hash": spec.hash}], key=lambda s: s["hash"], run=dict, manifest={"kind": "test"})
    with pytest.raises(ValueError, match=r"a worker handed back a record that is not sound \(it is not a GP sweep"):
        sweep.run_plan(gp_sweep.GP_SWEEP, tmp_path, plan, executor=finished)
    assert not (tmp_path / "results.json").exists()
    record = gp_sweep.run_spec(spec)
    other = sweep.Plan(specs=[spec], key=lambda s: "f" * 16, run=lambda s: record, manifest={"kind": "test"})
    with pytest.raises(ValueError, match=r"is not one of the runs to do"):
        sweep.run_plan(gp_sweep.GP_SWEEP, tmp_path / "other", other, executor=finished)
    assert not (tmp_path / "other" / "results.json").exists()


@pytest.mark.slow
def test_the_cli_takes_an_executor_and_explains_a_missing_engine(tmp_path):
    """`--executor` is a sweep flag of both the GP and the LM sweep; an engine that is not installed is a clear
    error (exit 2) before any run trains, not an ImportError traceback."""
    for command in (["gp", "sweep", "--help"], ["lm", "sweep", "--help"]):
        shown = subprocess.run([sys.executable, "-m", "cem_core", *command], capture_output=True, text=True,
                               cwd=ROOT, timeout=120).stdout
        assert "--executor {pool,submitit-local,slurm}" in shown and "--slurm-partition" in shown
    hidden = tmp_path / "no-submitit"
    hidden.mkdir()
    (hidden / "submitit.py").write_text("raise ImportError('not installed here')\n")
    result = subprocess.run([sys.executable, "-m", "cem_core", "gp", "sweep", "--preset", "quick", "--out",
                             str(tmp_path / "out"), "--executor", "slurm"], capture_output=True, text=True, cwd=ROOT,
                            timeout=120, env={**os.environ, "PYTHONPATH": str(hidden)})
    assert result.returncode == 2, result.stderr
    assert "needs submitit, which is not installed: pip install submitit" in result.stderr
    assert "Traceback" not in result.stderr and not (tmp_path / "out").exists()
