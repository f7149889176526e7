"""cem_core/web/explore.js, the energy page's computation in the browser, against the Python core it mirrors
(cem_core.ui.seeded, cem_core.ui.explore's explore and diagnose), in Debian's Chromium through Playwright: one
page, the script loaded with add_script_tag(path=...), the states run in chunks (tests/web_mirror.py).

Every number is compared under web_mirror.close: |js - py| <= 1e-5 max(|py|, 1e-5 max|py array|), the floor
because an element near zero carries the rounding of its array's scale (its docstring says why 1e-10 of it);
booleans, shapes, integers and the diagnoses' texts must be equal.
"""
import base64
import math
import random
import statistics
import time

import numpy as np
import pytest
import web_mirror as mirror
from appdriver import CHROMIUM, chromium
from conftest import ROOT, require_system_package

from cem_core.nn.activations import ACTIVATIONS
from cem_core.nn.diagonals import DIAGONAL_FORMS, DIAGONALS
from cem_core.nn.precondition import PRECONDITIONERS
from cem_core.ui import seeded
from cem_core.ui.controls import EnergyControls
from cem_core.ui.explore import diagnose, explore

pytestmark = pytest.mark.slow          # a real Chromium
require_system_package(CHROMIUM is not None, "the browser test", "chromium", module_level=True)

SCRIPT = ROOT / "cem_core" / "web" / "explore.js"
PYFORMAT = ROOT / "cem_core" / "web" / "pyformat.js"    # Python's number formats, which the notes use
CHUNK = 40                             # states per page.evaluate


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _page(browser, script=SCRIPT):
    page = browser.new_page()
    page.add_script_tag(path=str(PYFORMAT))
    page.add_script_tag(path=str(script))
    return page


@pytest.fixture(scope="module")
def page(browser):
    p = _page(browser)
    yield p
    p.close()


def _array(b64: str, dtype: str) -> np.ndarray:
    return np.frombuffer(base64.b64decode(b64), dtype=dtype)


def _run(page, states: list[dict], tokens=None) -> tuple[list[dict], float]:
    """The JavaScript explore and diagnose of each state (its controls' values), chunked; and the seconds taken."""
    jobs = [{"values": s, "token": None if tokens is None else tokens[k]} for k, s in enumerate(states)]
    start, out = time.perf_counter(), []
    for k in range(0, len(jobs), CHUNK):
        out += page.evaluate(mirror.RUN_JS, jobs[k:k + CHUNK])
    return [dict(r, data=mirror.decode(r["data"])) for r in out], time.perf_counter() - start


def _compare(page, states: list[dict], tokens=None) -> tuple[list[str], dict]:
    """Every mismatch between JavaScript and Python over the states, and the timings."""
    results, js_seconds = _run(page, states, tokens)
    problems, py_seconds = [], []
    for k, (values, js) in enumerate(zip(states, results)):
        start = time.perf_counter()
        py = mirror.python_side(values, None if tokens is None else tokens[k])
        py_seconds.append(time.perf_counter() - start)
        problems += mirror.mismatches(values, py, js)
    return problems, {"js": [r["ms"] / 1e3 for r in results], "py": py_seconds, "js_total": js_seconds}


# -- the generator -------------------------------------------------------------------------------------------------

def test_the_generator_draws_pythons_bits_uniforms_and_normals_exactly(page):
    """bits, uniforms and normals bit for bit, and the normals' log and cos on their own. Neither language
    specifies log or cos to the bit (glibc and Chromium's Math differ in the last bit for some of these on some
    machines), so both sides compute them from adds, multiplies and divides alone (seeded.box_muller_log,
    seeded.cos_turns), which every IEEE 754 machine rounds alike."""
    cases = [(seed, stream, 1000) for seed in (0, 1, 9999, 2 ** 31 - 1, 2 ** 32 - 1) for stream in range(10)]
    cases += [(0, 0, 100_000), (9999, 3, 100_000), (1, 9, 30_000)]
    got = page.evaluate("""(cases) => cases.map(([seed, stream, count]) => {
      const b64 = (v) => { const b = new Uint8Array(v.buffer); let s = "";
        for (let k = 0; k < b.length; k += 0x8000) s += String.fromCharCode.apply(null, b.subarray(k, k + 0x8000));
        return btoa(s); };
      const s = CEMExplore.seeded;
      return [b64(s.bits(seed, stream, count)), b64(s.uniforms(seed, stream, count)),
              b64(s.normals(seed, stream, count))];
    })""", cases)
    for (seed, stream, count), (bits, uniforms, normals) in zip(cases, got):
        np.testing.assert_array_equal(_array(bits, "<u4"), seeded.bits(seed, stream, count), err_msg=f"{seed, stream}")
        np.testing.assert_array_equal(_array(uniforms, "<f8"), seeded.uniforms(seed, stream, count))
        np.testing.assert_array_equal(_array(normals, "<f8"), seeded.normals(seed, stream, count),
                                      err_msg=f"{seed, stream}")
    u = seeded.uniforms(5, 4, 50_000)
    logs, cosines = page.evaluate("(u) => [u.map(CEMExplore.seeded.boxMullerLog), u.map(CEMExplore.seeded.cosTurns)]",
                                  u.tolist())
    np.testing.assert_array_equal(logs, seeded.box_muller_log(u))
    np.testing.assert_array_equal(cosines, seeded.cos_turns(u))
    assert page.evaluate("CEMExplore.seeded.start(7, 3)") == seeded.start(7, 3)


def test_the_generators_log_and_cos_are_within_one_ulp():
    """box_muller_log and cos_turns against 120-bit mpmath: within 1 ulp of the exact log u and cos(2 pi u) on
    6,000 drawn u and on the edges (the smallest and largest u, either side of sqrt(1/2), 1/2 and every quarter
    turn), where libm's cos(2 pi u) loses its relative accuracy near the zeros."""
    import mpmath
    mpmath.mp.prec = 120
    edges = [0.5 / 2 ** 32, 1 - 0.5 / 2 ** 32, math.sqrt(0.5), np.nextafter(math.sqrt(0.5), 0), 0.5]
    edges += [q / 4 + e / 2 ** 32 for q in range(4) for e in (0.5, -0.5, 1.5, -1.5) if 0 < q / 4 + e / 2 ** 32 < 1]
    edges += [q / 8 + e / 2 ** 32 for q in (1, 3, 5, 7) for e in (0.5, -0.5)]
    u = np.concatenate([seeded.uniforms(11, 2, 6000), edges])

    def ulps(got, exact):
        return abs(got - float(exact)) / math.ulp(float(exact))

    logs, cosines = seeded.box_muller_log(u), seeded.cos_turns(u)
    worst_log = max(ulps(g, mpmath.log(mpmath.mpf(float(x)))) for g, x in zip(logs, u))
    worst_cos = max(ulps(g, mpmath.cos(2 * mpmath.pi * mpmath.mpf(float(x)))) for g, x in zip(cosines, u))
    assert worst_log <= 1.0 and worst_cos <= 1.0, (worst_log, worst_cos)


# -- the scalar functions ------------------------------------------------------------------------------------------

def _erf_cases() -> list[float]:
    rng = random.Random(0)
    return ([0.0, -0.0, 1e-300, 5e-324, 1e-8, -1e-8, 2.5, -2.5, 2.4999999999, 6.0, 5.9999, 30.0, -40.0]
            + [rng.uniform(-8, 8) for _ in range(3000)] + [10 ** rng.uniform(-12, 1) for _ in range(1000)])


def test_the_error_function_is_pythons_to_1e_14(page):
    """GELU's erf (JavaScript has none) against math.erf: relative error at most 1e-14 (measured: about 1e-15,
    printed) across the range its Phi meets (z / sqrt 2 for any z) and beyond."""
    xs = _erf_cases()
    got = page.evaluate("(xs) => xs.map(CEMExplore.erf)", xs)
    worst = max(abs(g - math.erf(x)) / max(abs(math.erf(x)), 1e-300) for x, g in zip(xs, got))
    print(f"\nerf: worst relative error {worst:.2e} over {len(xs)} values")
    assert worst <= 1e-14
    assert page.evaluate("Number.isNaN(CEMExplore.erf(NaN)) && CEMExplore.erf(Infinity) === 1")


def _format_cases() -> list[tuple[float, int | None]]:
    rng = random.Random(1)
    edges = [0.0, -0.0, math.inf, -math.inf, math.nan, 9.995, 9.9995, 0.125, 0.375, 2.5, 3.5, 99999.5, 999999.5,
             1e-5, 1e-4, 9.9995e-5, 0.0001, 123456, 1234567, 1e16, 1e22, 1e-300, 5e-324, 1.7976931348623157e308,
             0.001, 1.0, 10.0, 100.0, 1e6, 0.5, 1.5, 1.05, 1.005, 1.0005, 0.9995, 999.5, 9995.0, 2.675, 1.25e-7]
    values = edges + [-v for v in edges] + [rng.choice((-1, 1)) * 10 ** rng.uniform(-12, 12) for _ in range(300)]
    values += [round(rng.uniform(-100, 100), rng.randint(0, 4)) for _ in range(200)]   # short decimals: ties
    return [(v, p) for v in values for p in (3, 4, None)]


def test_format_g_is_pythons(page):
    """Python's format(x, '.3g' / '.4g' / 'g') on tiny, huge, negative and zero values, inf and nan, and
    rounding edges (9.995, exact ties such as 0.125 and 2.5 that round to even)."""
    cases = _format_cases()
    got = page.evaluate("(cases) => cases.map(([x, p]) => CEMFormat.formatG(x, p === null ? undefined : p))",
                        [[x, p] for x, p in cases])
    wrong = [(x, p, g, format(x, f".{p}g" if p else "g")) for (x, p), g in zip(cases, got)
             if g != format(x, f".{p}g" if p else "g")]
    assert not wrong, f"{len(wrong)} of {len(cases)} differ, e.g. (x, p, js, python) {wrong[:5]}"


# -- the exactness of explore and diagnose -------------------------------------------------------------------------

def test_explore_and_diagnose_equal_pythons_on_a_covering_grid(page):
    """240 valid states in which every value of every control appears (web_mirror.states: each choice, the ends
    and middles of each number, the page's most expensive states), and the first 12 again at a middle token:
    every array (shape and numbers), every rose flag and every diagnosis field and text as Python's."""
    states = mirror.states()
    assert len(states) >= 200
    for name, options in (mirror.CHOICES | mirror.NUMBERS).items():
        assert {s[name] for s in states} >= set(options), name
    pairs = {(s["diagonal"], s["diagonal_form"]) for s in states} | {(s["layer"], s["preconditioner"]) for s in states}
    forms = sum(len([f for f in DIAGONAL_FORMS.values() if not f.needs_diagonal or d != "none"]) for d in DIAGONALS)
    assert len(pairs) == forms + len(mirror.CHOICES["layer"]) * len(PRECONDITIONERS) == 5 + 12   # every pair allowed
    assert set(mirror.CHOICES["activation"]) == set(ACTIVATIONS) and set(mirror.CHOICES["diagonal"]) == set(DIAGONALS)
    assert {"joint"} <= set(mirror.CHOICES["layer"]) and set(mirror.CHOICES["preconditioner"]) == set(PRECONDITIONERS)
    problems, times = _compare(page, states)
    again = states[:12]
    tokens = [v["seq_len"] // 2 for v in again]
    more, _ = _compare(page, again, tokens)
    js, py = times["js"], times["py"]
    print(f"\n{len(states)} states: JavaScript {sum(js):.2f} s (median {1e3 * statistics.median(js):.1f} ms, largest "
          f"{1e3 * max(js):.0f} ms; {times['js_total']:.2f} s with the transfer), Python {sum(py):.2f} s (median "
          f"{1e3 * statistics.median(py):.1f} ms, largest {1e3 * max(py):.0f} ms)")
    for values, j, p in list(zip(states, js, py))[-len(mirror.LARGEST):]:
        print(f"  {EnergyControls.from_values(**values).cost():.3g} multiply-adds: JavaScript {1e3 * j:.0f} ms, "
              f"Python {1e3 * p:.0f} ms ({values['layer']}, width {values['width']}, seq_len {values['seq_len']}, "
              f"T {values['T']}, diagonal {values['diagonal']})")
    problems += more
    assert not problems, f"{len(problems)} mismatches:\n" + "\n".join(problems[:8])


def test_a_choice_registered_without_a_javascript_twin_fails_the_comparison(page):
    """An activation registered on the Python side only (tanh, Phi = log cosh): the covering grid holds it (its
    choices come from the registries), and the comparison of a state with it fails, as the exactness test would."""
    import torch

    from cem_core.nn.activations import Activation, register_activation
    register_activation(Activation("tanh", "tanh", torch.tanh, lambda z: torch.log(torch.cosh(z)), r"\tanh z",
                                   r"\log\cosh z"))
    try:
        assert "tanh" in EnergyControls.specs()["activation"][1]
        values = EnergyControls.from_values(**{**EnergyControls().values(), "layer": "mlp",
                                               "activation": "tanh"}).values()
        try:
            problems, _ = _compare(page, [values])
        except Exception as err:                      # the JavaScript refused the state outright
            problems = [str(err)]
        assert problems, "a state with an activation JavaScript does not know agreed with Python"
    finally:
        del ACTIVATIONS["tanh"]
    assert "tanh" not in EnergyControls.specs()["activation"][1]


def test_the_default_state_computes_within_a_frame(page):
    """The page redraws within one frame (16 ms) at the defaults: the median of 50 warm runs in Chromium (about
    0.3 ms); the largest state the page allows is timed too (printed: about 250 ms, it has no frame to fit)."""
    largest = EnergyControls.from_values(**mirror.LARGEST[0]).values()
    times = page.evaluate("""([small, large]) => {
      const median = (values, reps) => {
        const ts = [];
        for (let r = 0; r < reps; r++) {
          const t = performance.now();
          CEMExplore.explore(values);
          ts.push(performance.now() - t);
        }
        return ts.sort((a, b) => a - b)[Math.floor(reps / 2)];
      };
      median(small, 20);
      return [median(small, 50), median(large, 3)];
    }""", [EnergyControls().values(), largest])
    print(f"\nChromium, warm: the defaults {times[0]:.2f} ms, the largest state (block, width and sequence 128, "
          f"per-head diagonal, T 16) {times[1]:.0f} ms")
    assert times[0] < 16


def test_the_token_is_checked_as_in_python(page):
    """An explicit token out of range: the same sentence as Python's ValueError."""
    values = EnergyControls().values()
    with pytest.raises(ValueError) as err:
        mirror.python_side(values, values["seq_len"])
    message = page.evaluate("([v, t]) => { try { CEMExplore.explore(v, t); } catch (e) { return e.message; } }",
                            [values, values["seq_len"]])
    assert message == str(err.value)


def test_plain_gives_the_same_numbers_as_nested_arrays(page):
    """CEMExplore.plain (for JSON): every array nested as Python's .tolist(), rose as booleans, None as null."""
    values = EnergyControls.from_values(layer="block", T=3, seq_len=5).values()
    got = page.evaluate("(v) => CEMExplore.plain(CEMExplore.explore(v))", values)
    data, _ = mirror.python_side(values)
    assert got["token"] == data["token"] == 4
    for phase, mine in zip(data["phases"], got["phases"]):
        assert mine["rose"] == phase["rose"].tolist()
        assert (mine["weights"] is None) == (phase["weights"] is None)
        for key in ("energies", "update_norms", "radius", "path", "eigenvalues"):
            ok, _ = mirror.close(np.array(mine[key]), phase[key])
            assert np.shape(mine[key]) == phase[key].shape and ok.all(), (phase["name"], key)
        assert mine["landscape"]["true_plane"] is False
        ok, _ = mirror.close(np.array(mine["landscape"]["energy"]), phase["landscape"]["energy"])
        assert ok.all()


def test_the_script_runs_from_a_file_url(browser, tmp_path):
    """Classic scripts: an HTML file with nothing but a <script src> of pyformat.js and of explore.js (file://
    addresses) defines CEMExplore, and its notes are Python's."""
    html = tmp_path / "index.html"
    html.write_text(f'<!doctype html><meta charset="utf-8"><script src="{PYFORMAT.as_uri()}"></script>'
                    f'<script src="{SCRIPT.as_uri()}">'
                    '</script>')
    p = browser.new_page()
    try:
        p.goto(html.as_uri())
        assert p.evaluate("typeof CEMExplore.explore === 'function' && Object.keys(CEMExplore).sort().join()") \
            == "activations,diagnose,erf,explore,plain,seeded"
        c = EnergyControls()
        notes = p.evaluate("c => CEMExplore.diagnose(c, CEMExplore.explore(c)).map(d => d.text)", c.values())
        assert notes == [d.text for d in diagnose(c, explore(c))]
    finally:
        p.close()


# -- a changed formula is caught -----------------------------------------------------------------------------------

MUTATIONS = [   # (one line of explore.js, its replacement, the field the comparison must name)
    ("e[i] += 0.5 * anchor * ss;", "e[i] += 0.6 * anchor * ss;", "field.energies"),          # the anchor's 1/2
    ("energy += 0.5 * xdx;", "energy -= 0.5 * xdx;", "field.energies"),                     # distance form's sign
    ("turn === 1 ? -sin :", "turn === 1 ? sin :", "field.energies"),  # Box-Muller's cos, one quarter turn
    ("turn(q, i * d + k * dh, att.rope, i, 1)", "turn(q, i * d + k * dh, att.rope, i, -1)", "field.weights"),  # RoPE
    ('["the energy fell at every step for every token."]', '["the energy fell at every step."]', "diagnosis.text"),
]
MUTATION_STATES = [dict(anchor=1.0, T=4, diagonal="per_head", diagonal_form="distance", rope=True),
                   dict(layer="block", diagonal="shared", diagonal_form="distance", anchor=0.5, eta=0.3, T=3)]


@pytest.mark.parametrize("old,new,field", MUTATIONS, ids=[m[2] + ":" + m[1][:24] for m in MUTATIONS])
def test_a_changed_formula_is_reported_by_the_comparison(browser, page, tmp_path, old, new, field):
    """A copy of explore.js with one line changed fails the comparison, naming the field that moved."""
    script = SCRIPT.read_text()
    assert script.count(old) == 1, f"the line to change is not in explore.js exactly once: {old}"
    mutated = tmp_path / "explore.js"
    mutated.write_text(script.replace(old, new))
    p = _page(browser, mutated)
    try:
        states = [EnergyControls.from_values(**v).values() for v in MUTATION_STATES]
        problems, _ = _compare(p, states)
    finally:
        p.close()
    assert any(field in m for m in problems), problems[:3]
    honest, _ = _compare(page, states)
    assert not honest
