"""One sweep runner for every experiment (the GP sweep, the GP factor study, the LM sweeps).

A sweep folder DIR holds one sweep of one kind (an ``Experiment``):

- DIR/sweep.json, its manifest (``Plan.manifest``): what makes the sweep itself, written before any run trains.
  A folder whose manifest records another sweep, or whose records are not runs of this one, is refused with a
  message, so two sweeps never mix in one table; a folder made before manifests existed is adopted only when
  every run in it is one of the requested sweep's runs. A sweep that has grown (more runs, the same manifest
  otherwise, as the experiment's ``compare`` judges) rewrites it.
- DIR/results.json (a list of run records, rewritten atomically after every finished run) and DIR/results.csv.
  Every record is checked on load (its fields and their kinds, that its hash is the hash of its identity,
  that no run appears twice, and its checksums: a record edited by hand is refused naming the field) and
  when a worker hands it back (also: that it is a run still to do). A run seals its record (``integrity.seal``).
- DIR/.lock: one sweep writes to a folder at a time (``FolderLock``); a second is refused at once.
- DIR/cluster-logs/: the job logs, when a cluster engine ran the runs (``cluster``).

Runs are handed to an executor, ``executor(fn, specs, jobs)``, which yields records as runs finish: by default
``pool.finished`` (this process, or ``jobs`` local worker processes); ``cluster.executor(...)`` hands them to
a cluster engine. Every finished run is saved at once, so an interrupted sweep resumes with the same command.
"""
from __future__ import annotations

import json
import math
from collections.abc import Callable
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path

from .cluster import LOGS
from .integrity import FolderLock, foreign_files, json_hash, seal_problem, short_repr
from .pool import finished
from .records import atomic_write_text, load_records, read_json, save_records

SWEEP_MANIFEST = "sweep.json"
MANIFEST_FORMAT = 1                   # what a manifest's "format" says: the layout of its fields
RESULTS = "results.json"
KIND_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false", dict: "an object",
              list: "a list"}


def is_kind(value, kind) -> bool:
    """Whether a JSON value is of a record field's kind (a bool is not a number; an integer is a float)."""
    if kind is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, kind)


@dataclass(frozen=True)
class Experiment:
    """One kind of sweep, as the runner sees it: the schema of its run records and what its folders hold.

    ``check(record)`` adds the experiment's own checks of a record whose fields are sound ('' when none
    fails); ``compare(recorded, wanted)`` says how a folder's manifest differs from the requested sweep's
    ('' when it is the same sweep, perhaps grown); ``strangers(records, plan)`` names records that are not
    runs of the requested sweep."""
    label: str                                    # "GP sweep", "LM sweep": the lock's and the messages' name
    fields: dict                                  # field -> kind (str, int, float, bool, dict, list)
    csv_fields: tuple                             # the scalar fields results.csv shows
    identity: str                                 # the field whose json_hash is the record's "hash"
    compare: Callable[[dict, dict], str]
    own_files: tuple = ()                         # what else its folders hold (glob patterns), such as "runs"
    article: str = "a"                            # "a GP sweep", "an LM sweep"
    check: Callable[[dict], str] = field(default=lambda record: "")
    strangers: Callable[[list, Plan], str] = field(default=lambda records, plan: (
        f"{len(records)} of its runs are not runs of the requested sweep (first: {records[0]['hash']})"))

    def problem(self, record) -> str:
        """What is wrong with one run record ('' when nothing): its fields and their kinds, its hash, that it trained
        at least one step, the experiment's own checks (``check``) and its seal."""
        if not isinstance(record, dict):
            return f"{short_repr(record)} is not an object (a run record)"
        missing = [name for name in self.fields if name not in record]
        if len(missing) > len(self.fields) // 2:          # most of its fields are another kind's
            return (f"it is not {self.article} {self.label} record (another kind of sweep's?): it lacks {len(missing)} "
                    f"of the {len(self.fields)} fields one has ({', '.join(missing[:3])}, ...)")
        for name, kind in self.fields.items():
            if name not in record:
                return f"the field {name!r} is missing"
            if not is_kind(record[name], kind):
                return f"{name}={short_repr(record[name])} is invalid: must be {KIND_NAMES[kind]}"
        if json_hash(record[self.identity]) != record["hash"]:
            return (f"hash={record['hash']!r} is invalid: it is not the hash of the record's {self.identity} "
                    "(the record was edited)")
        if "steps" in self.fields and record["steps"] < 1:           # every kind of run trains
            return f"steps={record['steps']} is invalid: a run trains at least one step"
        return self.check(record) or seal_problem(record)

    def load(self, path) -> list[dict]:
        """The run records in a results.json ([] when there is none), each checked, none twice."""
        return load_records(path, self.problem)

    def save(self, out, records: list[dict]) -> None:
        save_records(out, records, self.csv_fields)


@dataclass(frozen=True)
class Plan:
    """One sweep to run: its runs, how to run one (``run(spec)`` gives its record; a module-level function or a
    partial of one, since it may be pickled into other processes), the hash of the record a spec gives
    (``key``), the manifest its folder records, and records of another folder to take as they are (``reuse``:
    runs already trained under the same configuration)."""
    specs: list
    key: Callable
    run: Callable
    manifest: dict
    reuse: list = field(default_factory=list)

    def keys(self) -> list[str]:
        return [self.key(s) for s in self.specs]


def not_finite(record: dict, fields: dict) -> str:
    """The first float or list-of-numbers field that is not finite, as a problem ('' when none is)."""
    for name, kind in fields.items():
        values = record[name] if kind is list else [record[name]] if kind is float else []
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in values):
            return f"{name}={short_repr(record[name])} is invalid: not finite in a run that did not diverge"
    return ""


def claim_folder(kind: Experiment, out: Path, plan: Plan, records: list[dict]) -> None:
    """Refuse a folder that holds another sweep, or files of another tool; adopt one that holds (part of)
    this one, writing its manifest when it has none or when the sweep has grown."""
    stray = foreign_files(out, (SWEEP_MANIFEST, RESULTS, "results.csv", LOGS, *kind.own_files))
    if stray:
        raise ValueError(f"{out} holds files that are not {kind.article} {kind.label}'s ({', '.join(stray[:6])}): "
                         "choose a new or empty folder with --out")
    recorded = recorded_manifest(out)
    wanted = set(plan.keys())
    problem = ""
    if recorded is not None and (differences := kind.compare(recorded, plan.manifest)):
        problem = f"its {SWEEP_MANIFEST} records {differences}"
    elif strangers := [r for r in records if r["hash"] not in wanted]:
        problem = kind.strangers(strangers, plan)
    if problem:
        raise ValueError(f"{out} holds another sweep ({problem}); runs of two sweeps must not mix in one folder: "
                         f"start afresh with another --out, or move {out} away")
    if recorded != plan.manifest:
        atomic_write_text(out / SWEEP_MANIFEST, json.dumps(plan.manifest, indent=1))


def recorded_manifest(out) -> dict | None:
    """The folder's sweep.json (None when it has none); refused when it is not a JSON object."""
    path = Path(out) / SWEEP_MANIFEST
    recorded = read_json(path) if path.exists() else None
    if recorded is not None and not isinstance(recorded, dict):
        raise ValueError(f"{path} is not a sweep manifest (a JSON object); move {out} away to start afresh")
    return recorded


def run_plan(kind: Experiment, out, plan: Plan, jobs: int = 1, executor=finished, on_start=None,
             on_done=None) -> list[dict]:
    """Run every run of the plan not yet in out/results.json; return all its records in plan order.

    Holds the folder's lock throughout. ``on_start(todo)`` is called with the specs to run once the folder is
    claimed, ``on_done(record)`` after each finished run (already saved). A record a worker hands back is
    checked like a loaded one, and must be one of the runs to do."""
    out = Path(out)
    with FolderLock(out, kind.label):
        records = kind.load(out / RESULTS)
        claim_folder(kind, out, plan, records)
        done = {r["hash"] for r in records}
        wanted = set(plan.keys())
        adopted = [r for r in plan.reuse if r["hash"] in wanted and r["hash"] not in done]
        if adopted:
            records += adopted
            done |= {r["hash"] for r in adopted}
            kind.save(out, records)
        todo = [s for s in plan.specs if plan.key(s) not in done]
        if on_start:
            on_start(todo)
        due = {plan.key(s) for s in todo}
        with closing(executor(plan.run, todo, jobs)) as runs:
            for record in runs:
                if problem := kind.problem(record) or ("" if record["hash"] in due else
                                                       f"run {record['hash']} is not one of the runs to do"):
                    raise ValueError(f"a worker handed back a record that is not sound ({problem}); the runs "
                                     f"that finished are kept in {out}")
                due.discard(record["hash"])
                records.append(record)
                kind.save(out, records)
                if on_done:
                    on_done(record)
        order = {k: i for i, k in enumerate(plan.keys())}
        records.sort(key=lambda r: order[r["hash"]])
        kind.save(out, records)
    return records


def stale(records: list[dict], keys) -> tuple[set, set]:
    """(hashes the sweep needs but the records lack, hashes in the records the sweep no longer has)."""
    want, have = set(keys), {r["hash"] for r in records}
    return want - have, have - want
