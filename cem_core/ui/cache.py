"""A cache bounded in bytes, not entries: the app keeps the states it has computed (shared by every
session) up to a byte budget, dropping the least recently used first. An entry cache of a fixed count
grows with the size of what it holds: 64 states of the largest energy page take about 5 GB.

    cache = shared("energy", max_bytes, busy)   # one per name in the process: every session and rerun sees it
    cache.get(key, make)     # make() once per key while it is kept; the value is never copied
    cache.get(key, make, busy)   # busy() (a note to show; it returns what clears it) while waiting for a slot
    cache.bytes              # the estimated bytes held (`nbytes`)
    clear_shared()           # every shared cache emptied (a benchmark's cold start)
"""
from __future__ import annotations

import os
import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from contextlib import contextmanager
from functools import partial

import numpy as np
import torch

# New states computed at once, over every cache and session: a class opening thirty new links at once computes
# this many at a time (one per core), the others wait their turn with a note, instead of all of them sharing the
# cores thirty ways (each page thirty times slower) and holding thirty computations' memory.
COMPUTE_SLOTS = max(2, os.cpu_count() or 2)
BUSY_AFTER = 0.3                # seconds a computation waits for a slot before its session is told it waits
_SLOTS = threading.BoundedSemaphore(COMPUTE_SLOTS)
_HELD = threading.local()       # whether this thread holds a slot: a computation inside another takes no second one


@contextmanager
def compute_slot(busy: Callable[[], Callable[[], None]] | None = None):
    """Hold one of the COMPUTE_SLOTS for a computation (a thread that holds one already keeps it: a page's views
    computed from its descent would otherwise wait for themselves). Waiting longer than BUSY_AFTER calls
    ``busy()`` (the page shows a short note) and what it returns once the slot is had (the note goes)."""
    if getattr(_HELD, "slot", False):
        yield
        return
    if not _SLOTS.acquire(timeout=BUSY_AFTER):
        clear = busy() if busy is not None else None
        _SLOTS.acquire()
        if clear is not None:
            clear()
    _HELD.slot = True
    try:
        yield
    finally:
        _HELD.slot = False
        _SLOTS.release()


class _Flight:
    """One computation in progress: the sessions that ask for the same key meanwhile wait for its result."""

    def __init__(self):
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None


def _flight_value(flight: _Flight):
    """The value of a computation another session runs, once it is done (its error, if it failed)."""
    flight.done.wait()
    if flight.error is not None:
        raise flight.error
    return flight.value


class SizedCache:
    """Least-recently-used entries up to `max_bytes` (estimated by `nbytes`); a value larger than the whole
    budget is returned but not kept. Safe to share between threads (the app's sessions): a key is computed once
    however many sessions ask for it at the same time (the others wait for that computation and get its value),
    so twelve students opening one new link cost one computation, not twelve; and new keys are computed at most
    COMPUTE_SLOTS at a time over every cache (``compute_slot``)."""

    def __init__(self, max_bytes: int, busy: Callable[[], Callable[[], None]] | None = None):
        self.max_bytes, self.busy = max_bytes, busy           # busy: get's default
        self._items: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._flights: dict[Hashable, _Flight] = {}
        self._lock = threading.Lock()
        self.bytes = 0
        self.computed = 0                          # computations run (what single flight saves is visible)

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self.bytes = 0

    def get(self, key: Hashable, make: Callable[[], object], busy: Callable[[], Callable[[], None]] | None = None):
        """The value kept for `key`, or the one another session is computing now, or ``make()``, computed in one of
        the COMPUTE_SLOTS (``compute_slot``, with ``busy``). A computation is registered only once its slot is
        held, so every computation another session waits for is running, never itself waiting."""
        with self._lock:
            found = self._found(key)
        if found is not None:
            return found()
        with compute_slot(busy or self.busy):
            with self._lock:
                found = self._found(key)
                if found is None:
                    flight = self._flights[key] = _Flight()
                    self.computed += 1
            if found is None:
                try:
                    flight.value = make()             # outside the lock: other keys are not held up
                    self._keep(key, flight.value)
                except BaseException as error:
                    flight.error = error
                    raise
                finally:
                    with self._lock:
                        del self._flights[key]
                    flight.done.set()
        return flight.value if found is None else found()     # another's computation: waited for without a slot

    def _found(self, key: Hashable) -> Callable[[], object] | None:
        """(Under the lock.) What gives the key's value without computing it: the kept value, or the wait for the
        computation in flight; None when neither is there."""
        if key in self._items:
            self._items.move_to_end(key)
            value = self._items[key][0]
            return lambda: value
        flight = self._flights.get(key)
        return None if flight is None else partial(_flight_value, flight)

    def _keep(self, key: Hashable, value) -> None:
        size = nbytes(value)
        with self._lock:
            if key not in self._items and size <= self.max_bytes:
                self._items[key] = (value, size)
                self.bytes += size
                while self.bytes > self.max_bytes:
                    _, (_, dropped) = self._items.popitem(last=False)
                    self.bytes -= dropped


_SHARED: dict[str, SizedCache] = {}
_SHARED_LOCK = threading.Lock()


def shared(name: str, max_bytes: int, busy: Callable[[], Callable[[], None]] | None = None) -> SizedCache:
    """The process's cache called `name` (made on first use with `max_bytes` and `busy`). A page script is run anew
    on every rerun, so its own globals do not last; this module's do."""
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = SizedCache(max_bytes, busy)
        return _SHARED[name]


def clear_shared() -> None:
    """Empty every shared cache (a benchmark's cold start)."""
    with _SHARED_LOCK:
        for cache in _SHARED.values():
            cache.clear()


def nbytes(value, seen: set | None = None) -> int:
    """The memory a value holds, arrays by their buffers, containers and figures (plotly's, by their JSON
    form) by their contents; an object reached twice counts once."""
    seen = set() if seen is None else seen
    if id(value) in seen:
        return 0
    seen.add(id(value))
    if isinstance(value, np.ndarray):             # its buffer counted once: the array's own, or its base's
        if value.base is None:
            return sys.getsizeof(value)
        base = value.base
        return sys.getsizeof(value) + (nbytes(base, seen) if isinstance(base, (np.ndarray, torch.Tensor))
                                       else value.nbytes)
    if isinstance(value, torch.Tensor):
        return value.untyped_storage().nbytes()
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(nbytes(k, seen) + nbytes(v, seen) for k, v in value.items())
    if isinstance(value, (list, tuple, set, frozenset)):
        return sys.getsizeof(value) + sum(nbytes(v, seen) for v in value)
    if hasattr(value, "to_plotly_json"):
        return nbytes(value.to_plotly_json(), seen)
    return sys.getsizeof(value)
