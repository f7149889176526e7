"""What keeps a result folder whole: one writer at a time, identities compared field by field,
and checksums of the files a run depends on.

- `FolderLock(folder)`: an exclusive lock on ``folder/.lock`` held for the life of a run. The
  operating system releases it when the holder exits, however it exits (SIGKILL included), so a
  crashed run never leaves a folder locked. A second process (or thread) is refused at once
  with `FolderBusy`, whose message names the holder (pid, command, start time).
- `identity_differences(recorded, wanted)`: the dotted names of the fields that differ between
  two identity records, for refusals that say exactly what changed.
- `foreign_files(folder, own)`: what in a folder belongs to no run of the kind that claims it.
- `temporary_files(folder)`: the temporaries an interrupted atomic write of ours left behind, named
  ``.NAME.cem-tmp-XXXX`` (never a user's ``*.tmp``) and regular files (never a link): the only files
  a run ever removes besides its own outputs.
- `json_hash(value)`, `file_sha256(path)`: the hash that identifies a configuration, and the
  checksum recorded when a file is written and verified when it is read.
- `seal(record)`, `seal_problem(record)`: a run record's checksums, one per field, written with it and checked
  when it is read, so a hand edit (a metric changed, a label moved to another row) is refused naming the field.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import socket
import stat
import sys
import time
from fnmatch import fnmatch
from pathlib import Path

LOCK_NAME = ".lock"
TEMPORARY_MARK = ".cem-tmp-"     # atomic_write's temporaries: "." + NAME + TEMPORARY_MARK + a unique suffix
TEMPORARY_GLOB = f".*{TEMPORARY_MARK}*"
# a run's or sweep's folder holds LOCK_NAME and one of these (the LM run record and checkpoint manifest, a
# sweep's manifest, a comparison's table): a bare .lock may be another tool's (pytest keeps one in its basetemp)
RUN_MARKERS = ("run.json", "checkpoints.json", "sweep.json", "compare.json")
LOCK_OFFSET = 1 << 20     # Windows locks a byte range: one far past the holder's note, which stays readable


def is_run_folder(names) -> bool:
    """Whether a folder holding the file `names` is a run's or sweep's folder: LOCK_NAME and a RUN_MARKERS file."""
    names = set(names)
    return LOCK_NAME in names and any(marker in names for marker in RUN_MARKERS)


class FolderBusy(ValueError):
    """Another process is writing to the folder (a ValueError: the CLI and the app show the message)."""


def _try_lock(fd: int) -> bool:
    """Take an exclusive, non-blocking lock on the open file; False when someone else holds it."""
    try:
        import fcntl
    except ImportError:                                  # Windows
        import msvcrt
        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)   # per open file: threads of one process exclude each other too
    except BlockingIOError:
        return False
    return True


def _unlock(fd: int) -> None:
    try:
        import fcntl
    except ImportError:
        import msvcrt
        os.lseek(fd, LOCK_OFFSET, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    fcntl.flock(fd, fcntl.LOCK_UN)


class FolderLock:
    """Exclusive use of a folder for the life of a run: ``with FolderLock(out, "LM run"): ...``.

    ``timeout`` > 0 waits that many seconds for the holder to finish (for short critical
    sections such as starting a job); the default refuses at once."""

    def __init__(self, folder, what: str = "run", timeout: float = 0.0):
        self.folder, self.what, self.timeout = Path(folder), what, timeout
        self.path = self.folder / LOCK_NAME
        self._fd: int | None = None

    def acquire(self) -> "FolderLock":
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            # never through a link: a planted .lock -> a user's file would have that file truncated
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
        except OSError as err:                   # a file where the folder or a parent should be, no permission
            if err.errno == errno.ELOOP or self.path.is_symlink():
                reason = f"its {LOCK_NAME} is a symbolic link, which a run never follows; remove the link"
            elif self.path.is_dir():
                reason = f"its {LOCK_NAME} is not a regular file but a folder; remove it"
            elif self.folder.is_file():
                reason = "it is a file, not a folder"
            else:
                reason = err.strerror or str(err)
            raise ValueError(f"out={str(self.folder)!r} is invalid: {reason} (the {self.what}'s folder)") from None
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise ValueError(f"out={str(self.folder)!r} is invalid: its {LOCK_NAME} is not a regular file; "
                             f"remove it (the {self.what}'s folder)")
        try:
            self._wait_for(fd)
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            os.write(fd, json.dumps(holder_record()).encode())
        except BaseException:
            os.close(fd)                         # closing also lets go of the lock
            raise
        self._fd = fd
        return self

    def _wait_for(self, fd: int) -> None:
        deadline = time.monotonic() + self.timeout
        while not _try_lock(fd):
            if time.monotonic() >= deadline:
                raise FolderBusy(f"{self.folder} is in use ({self.holder()}): only one "
                                 f"{self.what} may write to a folder at a time; wait for it to finish, "
                                 "or choose another folder")
            time.sleep(0.05)

    def release(self) -> None:
        if self._fd is None:
            return
        fd, self._fd = self._fd, None
        try:
            os.ftruncate(fd, 0)
            _unlock(fd)
        finally:
            os.close(fd)

    def holder(self, wait: float = 1.0) -> str:
        """Who holds the lock, as its holder wrote it. A holder that has just taken the lock may not
        have written its note yet: wait up to `wait` seconds for it."""
        deadline = time.monotonic() + wait
        while True:
            try:
                h = json.loads(self.path.read_text())
                return f"pid {h['pid']} on {h['host']}, started {h['started']}: {h['command']}"
            except (OSError, ValueError, KeyError, TypeError):
                if time.monotonic() >= deadline:
                    return "holder unknown"
            time.sleep(0.02)

    def __enter__(self) -> "FolderLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def holder_record() -> dict:
    """This process, as a lock holder names itself."""
    program = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else "python"
    if program == "__main__.py":                             # python -m cem_core
        program = "python -m cem_core"
    command = " ".join([program, *sys.argv[1:]])
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
            "command": command[:300]}


class _Absent:
    def __repr__(self) -> str:
        return "(absent)"


ABSENT = _Absent()


def identity_differences(recorded: dict, wanted: dict, prefix: str = "") -> list[str]:
    """Dotted names of the fields whose values differ (or that only one side has)."""
    names = []
    for key in sorted(set(recorded) | set(wanted)):
        a, b = recorded.get(key, ABSENT), wanted.get(key, ABSENT)
        if isinstance(a, dict) and isinstance(b, dict):
            names += identity_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            names.append(f"{prefix}{key}")
    return names


def describe_differences(recorded: dict, wanted: dict, limit: int = 6) -> str:
    """'data.path: 'a' there, 'b' now; ...' for the first `limit` differing fields."""
    parts = []
    for name in identity_differences(recorded, wanted)[:limit]:
        a, b = _lookup(recorded, name), _lookup(wanted, name)
        parts.append(f"{name}: {short_repr(a)} there, {short_repr(b)} now")
    return "; ".join(parts)


def _lookup(record: dict, dotted: str):
    value = record
    for key in dotted.split("."):
        value = value.get(key, ABSENT) if isinstance(value, dict) else ABSENT
    return value


def short_repr(value) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def foreign_files(folder: Path, own: tuple[str, ...]) -> list[str]:
    """Names in `folder` that match none of the glob patterns `own` (nor the lock or a temporary
    file): what another tool, or another kind of run, left there."""
    own = (*own, LOCK_NAME, TEMPORARY_GLOB)
    return sorted(p.name for p in Path(folder).iterdir() if not any(fnmatch(p.name, pattern) for pattern in own))


def temporary_files(folder) -> list[Path]:
    """The leftover temporaries of our atomic writes in `folder` (module docstring), oldest name first."""
    return sorted(p for p in Path(folder).glob(TEMPORARY_GLOB) if p.is_file() and not p.is_symlink())


def json_hash(value) -> str:
    """A short, stable hash of a JSON-able value (sorted keys): the identity of a configuration."""
    return hashlib.sha256(json.dumps(value, sort_keys=True).encode()).hexdigest()[:16]


def file_sha256(path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


CHECKSUMS = "checksums"       # a sealed run record's field: {field: json_hash of its value} for every other field


def seal(record: dict) -> dict:
    """The record with its checksums: one per field, so that a later edit names the field it changed."""
    fields = {k: v for k, v in record.items() if k != CHECKSUMS}
    return fields | {CHECKSUMS: {name: json_hash(value) for name, value in fields.items()}}


def seal_problem(record: dict) -> str:
    """What shows that a run record is not as its run wrote it ('' when its checksums hold)."""
    sums = record.get(CHECKSUMS)
    if not isinstance(sums, dict):
        return (f"it has no {CHECKSUMS} field (a run writes one with its record, so that an edit can be seen): "
                "it was written by hand or by another tool")
    fields = [k for k in record if k != CHECKSUMS]
    for name in fields:
        if name not in sums:
            return f"the field {name!r} was added after the run wrote the record (it has no checksum)"
        if sums[name] != json_hash(record[name]):
            return (f"{name}={short_repr(record[name])} is not what the run recorded (its checksum differs): "
                    "the record was edited")
    if removed := [name for name in sums if name not in record]:
        return f"the field {removed[0]!r} was removed after the run wrote the record"
    return ""
