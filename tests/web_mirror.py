"""The comparison of cem_core/web/explore.js with the Python core it mirrors (tests/test_web_explore.py).

``states()`` is a covering grid of valid energy-page states; ``RUN_JS`` is the page-side function that runs
``CEMExplore.explore`` and ``diagnose`` on a chunk of them and returns every array as base64 bytes (JSON lists
of a block's 2 million weights would take seconds to carry); ``mismatches`` compares one state's JavaScript
result with Python's ``explore`` and ``diagnose``, field by field, under ``close``'s tolerance.
"""
from __future__ import annotations

import base64
import random
from dataclasses import asdict

import numpy as np

from cem_core.ui.controls import COST_LIMIT, EnergyControls
from cem_core.ui.explore import diagnose, explore

RTOL = 1e-5        # every number: |js - py| <= RTOL max(|py|, FLOOR max|py array|)
FLOOR = 1e-5       # an element near zero is held to RTOL FLOOR of its array's largest magnitude (see ``close``)

RUN_JS = """(chunk) => {
  const b64 = (view) => {
    const bytes = new Uint8Array(view.buffer, view.byteOffset, view.byteLength);
    let s = "";
    for (let k = 0; k < bytes.length; k += 0x8000) s += String.fromCharCode.apply(null, bytes.subarray(k, k + 0x8000));
    return btoa(s);
  };
  const encode = (x) => {
    if (x === null || typeof x !== "object") return x;
    if (Array.isArray(x)) return x.map(encode);
    if (x.shape && ArrayBuffer.isView(x.data)) {
      return {shape: x.shape, dtype: x.data instanceof Uint8Array ? "|b1" : "<f8", b64: b64(x.data)};
    }
    return Object.fromEntries(Object.entries(x).map(([k, v]) => [k, encode(v)]));
  };
  return chunk.map(({values, token}) => {
    const t0 = performance.now();
    const data = CEMExplore.explore(values, token);
    const ms = performance.now() - t0;
    return {data: encode(data), diagnosis: CEMExplore.diagnose(values, data), ms};
  });
}"""


def decode(x):
    """RUN_JS's encoding back to numpy arrays (bool for rose), lists and dicts."""
    if isinstance(x, list):
        return [decode(v) for v in x]
    if isinstance(x, dict) and set(x) == {"shape", "dtype", "b64"}:
        return np.frombuffer(base64.b64decode(x["b64"]), dtype=x["dtype"]).reshape(x["shape"])
    if isinstance(x, dict):
        return {k: decode(v) for k, v in x.items()}
    return x


# -- the states ----------------------------------------------------------------------------------------------------

# every value the page offers, from the registries the Python side iterates (layers and block modes, diagonals and
# their forms, preconditioners, activations): a choice registered without a JavaScript twin fails the comparison
CHOICES = {name: tuple(EnergyControls.specs()[name][1]) for name in
           ("layer", "diagonal", "diagonal_form", "preconditioner", "activation")} | {"rope": (False, True)}
NUMBERS = {"T": (1, 2, 4, 8, 16), "eta": (0.05, 0.3, 1.0, 2.5, 20.0), "anchor": (0.0, 0.5, 1.0, 5.0),
           "p_scale": (0.0, 0.3, 1.5, 3.0), "rank": tuple(range(1, 9)), "heads": tuple(range(1, 9)),
           "width": (2, 3, 4, 6, 8, 12, 16, 24, 32, 64, 96, 128, 256, 512),
           "seq_len": (2, 3, 5, 8, 16, 33, 64, 128, 256),
           "seed": (0, 1, 42, 9999), "token": (0, 1, 3, 255), "heat_head": tuple(range(8))}
LARGEST = (dict(layer="block", width=128, seq_len=128, T=16, diagonal="per_head", heads=2),   # the page's largest
           dict(layer="joint", width=128, seq_len=128, T=16, diagonal="per_head", heads=2, diagonal_form="distance",
                rope=True, preconditioner="dlr", rank=8, anchor=1.0, activation="gelu", token=64),
           dict(layer="attention", width=64, seq_len=256, T=4, heads=2, diagonal="shared", rope=True, token=128),
           dict(layer="mlp", width=256, seq_len=64, T=8, preconditioner="psd", rank=8, p_scale=3.0, activation="gelu"),
           dict(layer="attention", width=512, seq_len=16, T=4, heads=8, preconditioner="dlr", rank=8, p_scale=1.5,
                anchor=0.5))
CHEAP = 3e7        # the random states' cost at most (the page's rough multiply-adds), so the grid runs in seconds


def _valid(values: dict) -> bool:
    try:
        EnergyControls.from_values(**values)
    except ValueError:
        return False
    return True


def states(count: int = 240, seed: int = 0) -> list[dict]:
    """`count` valid states (EnergyControls.from_values builds each) in which every value of every control in
    CHOICES and NUMBERS appears: first, for each such value, a random state holding it; then random states to
    `count`; the LARGEST states (the page's most expensive) last; each as the flat values of every control. Random
    states stay below CHEAP, those drawn for one value below a quarter of COST_LIMIT."""
    rng = random.Random(seed)
    grid = CHOICES | NUMBERS
    out = [dict(values) for values in LARGEST]

    def draw(fixed: dict) -> dict | None:
        for _ in range(2000):
            values = {k: rng.choice(v) for k, v in grid.items()} | fixed
            if values["diagonal"] == "none":
                values["diagonal_form"] = fixed.get("diagonal_form", "bilinear")
            for k in ("width", "seq_len"):                             # favour small sizes: most states are cheap
                if k not in fixed and rng.random() < 0.6:
                    values[k] = rng.choice(grid[k][:6])
            if _valid(values) and EnergyControls.from_values(**values).cost() <= (COST_LIMIT / 4 if fixed else CHEAP):
                return values
        return None

    for name, options in grid.items():
        for value in options:
            if not any(s.get(name, EnergyControls().values()[name]) == value for s in out):
                found = draw({name: value})
                assert found is not None, f"no valid state with {name}={value}"
                out.append(found)
    while len(out) < count:
        out.append(draw({}))
    return [EnergyControls.from_values(**values).values() for values in out[len(LARGEST):] + out[:len(LARGEST)]]


# -- the comparison ------------------------------------------------------------------------------------------------

def close(js, py, scale: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Whether each element agrees: |js - py| <= RTOL max(|py|, FLOOR max|py|) (equal NaNs and infinities agree);
    `scale` stands for max|py| where py is one element of a larger array.

    RTOL 1e-5 is the brief's; the floor holds elements near zero to 1e-10 of their array's largest magnitude,
    where their rounding error lives (an energy crossing zero, a coordinate of the plane's origin, a tip on an
    axis: each sums terms of the array's size, so its error is some 1e-16 of that size, not of its own). 1e-10
    leaves a million times the rounding of one sum and is far below what a changed formula moves. The distances
    off the landscape's plane are differences of vectors the size of the trajectory, zero but for rounding for
    x^(0..2): their scale is the trajectory's (``mismatches``).
    Returns (ok, the allowed difference) per element."""
    py, js = np.asarray(py, dtype=float), np.asarray(js, dtype=float)
    finite = np.isfinite(py)
    if scale is None:
        scale = np.abs(py[finite]).max() if finite.any() else 0.0
    allowed = RTOL * np.maximum(np.abs(py), FLOOR * scale)
    with np.errstate(invalid="ignore"):
        ok = np.abs(js - py) <= allowed
    same = (np.isnan(js) & np.isnan(py)) | (np.isinf(py) & (js == py))
    return ok | same, allowed


def python_side(values: dict, token: int | None = None) -> tuple[dict, list[dict]]:
    """Python's explore and diagnose of a state, the diagnoses as dicts (tuples as lists)."""
    c = EnergyControls.from_values(**values)
    data = explore(c, token)
    notes = []
    for d in diagnose(c, data):
        note = asdict(d)
        note["rises"] = [dict(r, steps=list(r["steps"])) for r in note["rises"]]
        notes.append({k: list(v) if isinstance(v, tuple) else v for k, v in note.items()})
    return data, notes


def _walk(where: str, py, js, out: list[str], scale: float | None = None) -> None:
    """Append a message per field where js differs from py (``close`` for numbers, == for everything else)."""
    if py is None or js is None:
        if not (py is None and js is None):
            out.append(f"{where}: js {'null' if js is None else 'a value'}, py {'None' if py is None else 'a value'}")
    elif isinstance(py, np.ndarray):
        if not isinstance(js, np.ndarray) or js.shape != py.shape:
            out.append(f"{where}: shape js {getattr(js, 'shape', type(js).__name__)}, py {py.shape}")
        elif py.dtype == bool:
            bad = np.flatnonzero(js.ravel() != py.ravel())
            if bad.size:
                k = tuple(int(v) for v in np.unravel_index(bad[0], py.shape))
                out.append(f"{where}: {bad.size} of {py.size} booleans differ, first at {k}: js {bool(js[k])}, "
                           f"py {bool(py[k])}")
        else:
            ok, allowed = close(js, py, scale)
            if not ok.all():
                excess = np.where(ok, -np.inf, np.abs(js - py) / np.where(allowed > 0, allowed, np.inf))
                excess = np.where(np.isnan(excess), np.inf, excess)
                k = tuple(int(v) for v in np.unravel_index(int(np.argmax(excess)), py.shape))
                out.append(f"{where}: {int((~ok).sum())} of {py.size} numbers differ, worst at {k}: "
                           f"js {float(js[k])!r}, py {float(py[k])!r} (allowed |Δ| {allowed[k]:.3g})")
    elif isinstance(py, dict):
        if set(py) != set(js):
            out.append(f"{where}: keys js {sorted(js)}, py {sorted(py)}")
        for k in py:
            if k in js:
                _walk(f"{where}.{k}", py[k], js[k], out, scale)
    elif isinstance(py, (list, tuple)):
        if len(py) != len(js):
            out.append(f"{where}: length js {len(js)}, py {len(py)}")
        for k, (p, j) in enumerate(zip(py, js)):
            _walk(f"{where}[{k}]", p, j, out, scale)
    elif isinstance(py, float) and not isinstance(py, bool):
        ok, allowed = close(np.array([js]), np.array([py]), scale)
        if not ok[0]:
            out.append(f"{where}: js {js!r}, py {py!r} (allowed |Δ| {allowed[0]:.3g})")
    elif not (type(js) is type(py) or isinstance(py, (int, float)) and not isinstance(py, bool)
              and isinstance(js, (int, float))) or js != py:
        out.append(f"{where}: js {js!r}, py {py!r}")


def mismatches(values: dict, py: tuple[dict, list[dict]], js: dict) -> list[str]:
    """Every field where the JavaScript result of a state differs from Python's, each message naming the state,
    the phase, the field and the worst element."""
    data, notes = py
    out: list[str] = []
    _walk("token", data["token"], js["data"]["token"], out)
    if len(data["phases"]) != len(js["data"]["phases"]):
        out.append(f"phases: js {len(js['data']['phases'])}, py {len(data['phases'])}")
    for phase, mine, note, my_note in zip(data["phases"], js["data"]["phases"], notes, js["diagnosis"]):
        name = phase["name"]
        _walk(f"phase {name}: field", {k: v for k, v in phase.items() if k != "landscape"},
              {k: v for k, v in mine.items() if k != "landscape"}, out)
        land = phase["landscape"]
        _walk(f"phase {name}: field.landscape", {k: v for k, v in land.items() if k != "off_plane"},
              {k: v for k, v in mine["landscape"].items() if k != "off_plane"}, out)
        _walk(f"phase {name}: field.landscape.off_plane", land["off_plane"], mine["landscape"].get("off_plane"), out,
              float(np.abs(np.concatenate((land["off_plane"], land["trajectory"].ravel()))).max()))
        scales = {"norms": phase["update_norms"], "radius": phase["radius"], "energy": phase["energies"],
                  "rises": phase["energies"]}
        for k in note:
            scale = float(np.nanmax(np.abs(scales[k]))) if k in scales and np.isfinite(scales[k]).any() else None
            _walk(f"phase {name}: diagnosis.{k}", note[k], my_note.get(k), out, scale)
        if set(my_note) != set(note):
            out.append(f"phase {name}: diagnosis keys js {sorted(my_note)}, py {sorted(note)}")
    return [f"state {values}: {m}" for m in out]
