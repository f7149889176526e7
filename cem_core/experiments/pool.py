"""Worker processes for sweeps: results as they finish, nothing left behind however the sweep ends.

``finished(fn, items, jobs)`` yields ``fn(item)`` for every item, in this process (``jobs`` = 1)
or in ``jobs`` spawned worker processes (one thread each is the caller's to set in ``fn``).
Workers leave Ctrl-C to the sweep's process and exit within a second when it dies, however it
dies (SIGKILL included). On Ctrl-C, an error, or when the caller closes the generator, the
workers are terminated at once; what finished was already yielded. A worker that dies (the system's
OOM killer, kill -9) ends the sweep with a ValueError saying so, never a BrokenProcessPool traceback.
"""
from __future__ import annotations

import os
import signal
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context

import psutil


def finished(fn, items: list, jobs: int):
    """fn(item) for each item as it finishes (in order when jobs = 1). ``fn`` must be a module-level
    function when jobs > 1 (it is pickled into spawned workers)."""
    if jobs == 1 or len(items) <= 1:
        yield from (fn(item) for item in items)
        return
    pool = ProcessPoolExecutor(max_workers=jobs, mp_context=get_context("spawn"), initializer=_start_worker,
                               initargs=(os.getpid(),))
    try:
        futures = [pool.submit(fn, item) for item in items]
        yield from (future.result() for future in as_completed(futures))
    except BrokenProcessPool:                       # a worker died without a word: the OOM killer, a kill -9
        _stop_workers(pool)
        raise ValueError("a sweep worker process ended abruptly (killed, perhaps by the system for lack of "
                         "memory); the runs that finished are kept: run the same command again to resume, with "
                         "fewer --jobs if memory is short") from None
    except BaseException:
        _stop_workers(pool)
        raise
    pool.shutdown()


def _start_worker(parent: int) -> None:
    """In each worker process: leave Ctrl-C to the parent (the terminal sends it to the whole process
    group), and exit as soon as the parent is gone, however it ended."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_exit_with_parent, args=(psutil.Process(parent),), name="exit-with-parent",
                     daemon=True).start()


def _exit_with_parent(parent: psutil.Process, every: float = 0.2) -> None:
    while _alive(parent):
        time.sleep(every)
    os._exit(1)


def _alive(process: psutil.Process) -> bool:
    """Whether the process still runs: is_running() also compares its start time, so a reused pid
    does not count (this works on every OS; Windows, unlike POSIX, does not give an orphan a new
    parent that getppid() would show). A killed parent that is not yet reaped is a zombie: gone."""
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _stop_workers(pool: ProcessPoolExecutor) -> None:
    """Cancel the queued runs and terminate the running ones now, not when they finish."""
    if hasattr(pool, "terminate_workers"):        # Python >= 3.14
        pool.terminate_workers()
        return
    workers = list(pool._processes.values())      # before 3.14 there is no public way
    manager = pool._executor_manager_thread
    pool.shutdown(wait=False, cancel_futures=True)
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.join(timeout=5)
    if manager is not None:
        # The pool's manager thread closes its wake-up pipe once it sees the workers gone; at exit
        # Python writes to that pipe unlocked (CPython before 3.12), so a close racing that write
        # printed "OSError: Bad file descriptor". Waiting for the thread leaves the pipe closed first.
        manager.join(timeout=5)


class SweepProgress:
    """What a sweep command shows: one line once its folder is claimed, then a bar over the runs to do,
    each finished run described by ``describe(record)``. A staged sweep (``staged``: its runs grow as earlier
    stages choose rates) starts from the runs already finished and shows each stage's line and bar."""

    def __init__(self, label: str, n_runs: int, out, jobs: int, describe, staged: bool = False):
        self.label, self.n_runs, self.out, self.jobs, self.describe, self.bar = label, n_runs, out, jobs, describe, None
        self.staged = staged

    def start(self, todo: list) -> None:
        from tqdm import tqdm
        if self.bar:
            self.bar.close()
        if self.staged:
            self.n_runs += len(todo)
        so_far = " so far" if self.staged else ""
        print(f"{self.label}: {self.n_runs} runs{so_far}, {self.n_runs - len(todo)} already finished in {self.out}, "
              f"{len(todo)} to run with {self.jobs} worker(s)", flush=True)
        self.bar = tqdm(total=len(todo), unit="run", file=sys.stdout)

    def done(self, record: dict) -> None:
        self.bar.update(1)
        self.bar.set_postfix_str(self.describe(record))

    def __enter__(self) -> "SweepProgress":
        return self

    def __exit__(self, *exc) -> None:
        if self.bar:
            self.bar.close()
