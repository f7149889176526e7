"""A cache bounded in bytes, not entries: the app keeps the states it has computed (shared by every
session) up to a byte budget, dropping the least recently used first. An entry cache of a fixed count
grows with the size of what it holds: 64 states of the largest energy page take about 5 GB.

    cache = shared("energy", max_bytes)   # one per name in the process: every session and rerun sees it
    cache.get(key, make)     # make() once per key while it is kept; the value is never copied
    cache.bytes              # the estimated bytes held (`nbytes`)
    clear_shared()           # every shared cache emptied (a benchmark's cold start)
"""
from __future__ import annotations

import sys
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import numpy as np
import torch


class _Flight:
    """One computation in progress: the sessions that ask for the same key meanwhile wait for its result."""

    def __init__(self):
        self.done = threading.Event()
        self.value: object = None
        self.error: BaseException | None = None


class SizedCache:
    """Least-recently-used entries up to `max_bytes` (estimated by `nbytes`); a value larger than the whole
    budget is returned but not kept. Safe to share between threads (the app's sessions): a key is computed once
    however many sessions ask for it at the same time (the others wait for that computation and get its value),
    so twelve students opening one new link cost one computation, not twelve."""

    def __init__(self, max_bytes: int):
        self.max_bytes = max_bytes
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

    def get(self, key: Hashable, make: Callable[[], object]):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key][0]
            flight = self._flights.get(key)
            mine = flight is None
            if mine:
                flight = self._flights[key] = _Flight()
                self.computed += 1
        if not mine:                              # another session computes it: wait for its value
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            return flight.value
        try:
            flight.value = make()                 # outside the lock: other keys are not held up
            self._keep(key, flight.value)
        except BaseException as error:
            flight.error = error
            raise
        finally:
            with self._lock:
                del self._flights[key]
            flight.done.set()
        return flight.value

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


def shared(name: str, max_bytes: int) -> SizedCache:
    """The process's cache called `name` (made on first use with `max_bytes`). A page script is run anew on
    every rerun, so its own globals do not last; this module's do."""
    with _SHARED_LOCK:
        if name not in _SHARED:
            _SHARED[name] = SizedCache(max_bytes)
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
