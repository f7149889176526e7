"""Sweeps beyond one machine: the runner's runs handed to a cluster engine, submitit (SLURM, or its local mode).

``executor(engine, logs, ...)`` gives an executor for ``sweep.run_plan`` (``executor(fn, specs, jobs)`` yields
records as runs finish), so every integrity rule stays the runner's: one process holds the folder's lock and
writes its results, the folder's identity is claimed before any run is submitted, and each record a job
hands back is checked before it is saved. At most ``jobs`` runs are in the engine at a time (a window that
moves as runs finish), so a cluster's queue is not flooded and an interrupted sweep loses at most ``jobs``
runs; on Ctrl-C, an error, or when the sweep closes the generator, the jobs still queued or running are
cancelled. Each job's logs go to ``logs``.

submitit is an optional extra (``pip install submitit``, ``.[cluster]``): its local mode runs each job in a
subprocess of this machine, the same code path as SLURM short of the scheduler.
"""
from __future__ import annotations

import contextlib
import re
import time
from pathlib import Path

import psutil

from cem_core.nn.validate import check_choice

from .pool import finished as pool_finished

ENGINES = ("pool", "submitit-local", "slurm")   # pool: this machine's worker processes (``pool.finished``)
LOGS = "cluster-logs"                    # a sweep folder's subfolder for the engine's job logs


def executor(engine: str, logs, timeout_min: int = 24 * 60, partition: str | None = None, poll: float = 0.5,
             **parameters):
    """An executor for ``sweep.run_plan``: 'pool' (this machine's worker processes), or one that submits each run as
    a job of submitit: 'submitit-local' (jobs are subprocesses of this machine) or 'slurm' (on ``partition``;
    ``parameters``: more of submitit's ``slurm_*`` settings, such as gpus_per_node=1)."""
    check_choice("engine", engine, ENGINES)
    if engine == "pool":
        return pool_finished
    try:
        import submitit
    except ImportError:
        raise ValueError(f"engine={engine!r} needs submitit, which is not installed: pip install submitit") from None
    logs = Path(logs)

    def finished(fn, items: list, jobs: int):
        engine_executor = (submitit.LocalExecutor(folder=logs) if engine == "submitit-local"
                           else submitit.AutoExecutor(folder=logs, cluster="slurm"))
        extra = {} if engine == "submitit-local" else {"slurm_partition": partition, **parameters}
        engine_executor.update_parameters(timeout_min=timeout_min, cpus_per_task=1,
                                          **{k: v for k, v in extra.items() if v is not None})
        waiting, running = list(items), []
        try:
            while waiting or running:
                while waiting and len(running) < jobs:
                    running.append(engine_executor.submit(fn, waiting.pop(0)))
                done = [job for job in running if job.done()]
                if not done:
                    time.sleep(poll)
                    continue
                for job in done:
                    running.remove(job)
                    yield _result(job)
        finally:
            _cancel(running, local=engine == "submitit-local")

    return finished


def _cancel(jobs: list, local: bool, grace: float = 2.0) -> None:
    """Cancel the jobs still queued or running. submitit's local mode asks a job's controller to stop with
    SIGINT, which a process started in the background (nohup, a shell's ``&``) ignores: so a local job's
    processes (its controller's pid is its job id) that outlive ``grace`` seconds are terminated, then killed."""
    tree = []
    for job in jobs:
        if local:
            try:
                controller = psutil.Process(int(job.job_id))
                tree += [controller, *controller.children(recursive=True)]      # before the controller is gone
            except psutil.Error:
                pass
        job.cancel(check=False)
    _, alive = psutil.wait_procs(tree, timeout=grace)
    for signal_them in ("terminate", "kill"):
        for process in alive:
            with contextlib.suppress(psutil.Error):
                getattr(process, signal_them)()
        _, alive = psutil.wait_procs(alive, timeout=grace)


def add_arguments(parser) -> None:
    """A sweep command's flags for where its runs go."""
    parser.add_argument("--executor", choices=ENGINES, default="pool",
                        help="where runs go: pool (this machine's worker processes, the default), submitit-local "
                             "(submitit jobs on this machine), slurm (submitit jobs on a SLURM cluster; the sweep "
                             "folder must be on a file system the nodes share)")
    parser.add_argument("--slurm-partition", help="the SLURM partition of --executor slurm")
    parser.add_argument("--timeout-min", type=int, default=24 * 60,
                        help="a cluster job's time limit in minutes (default 1440)")


def from_arguments(args, out) -> object:
    """The executor a sweep command's flags ask for; job logs in OUT/cluster-logs."""
    return executor(args.executor, Path(out) / LOGS, timeout_min=args.timeout_min, partition=args.slurm_partition)


def _result(job):
    """A finished job's return value; a job that failed ends the sweep with its error and where its log is."""
    try:
        return job.result()
    except Exception as err:  # noqa: BLE001 - submitit raises its own FailedJobError (and others) for a job
        parts = re.split(r"\n-{5,}\n", str(err))          # submitit's message: a title, the trace, where the logs are
        said = [line for line in (parts[1] if len(parts) > 2 else str(err)).splitlines() if line.strip()]
        raise ValueError(f"cluster job {job.job_id} failed ({said[-1] if said else type(err).__name__}); "
                         f"its log: {job.paths.stderr}; the runs that finished are kept: run the same command "
                         "again to resume") from None
