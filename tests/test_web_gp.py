"""The site's trained GP models in the browser (cem_core/web/gp.js and inside_figures.js) against the Python core they
mirror (cem_core.experiments.gp.inspect.inspect_function, cem_core.nn.readout.read_steps, cem_core.ui.inside), in
Debian's Chromium: every checkpoint of models/, exported as the site exports it (cem_core.ui.site_models).

Numbers: the browser computes in float64 from the checkpoint's float32 weights; the reference is the same readout in
Python with the model cast to float64 (``model.double()``: the same weights, exactly), and every readout (the
prediction after every step, both RMSEs, the posterior mean and sd, the energies, update norms and step sizes) must
agree to 1e-9 of its array's largest value (the worst measured is 3e-13); the attention weights, rounded to 5
decimals on both sides, to 1e-5. The app itself reads the checkpoints in float32, whose own rounding moves the
predictions by up to 2e-4 relative past the trained T (measured): that is float32's, not the mirror's.
"""
import base64
import json
import math
import shutil

import numpy as np
import pytest
import torch
from appdriver import CHROMIUM, chromium
from conftest import ROOT, require_system_package
from test_web_figures import view_difference

from cem_core.experiments.gp.inspect import GRID, inspect_function, parse_points
from cem_core.experiments.gp.task import sample_function_on_grid
from cem_core.experiments.gp.trained import GP_MODELS, load_gp_model
from cem_core.ui import inside, site_models
from cem_core.ui.inside_controls import InsideControls

pytestmark = pytest.mark.slow          # a real Chromium
require_system_package(CHROMIUM is not None, "the browser test", "chromium", module_level=True)

WEB = ROOT / "cem_core" / "web"
SCRIPTS = ("pyformat.js", "explore.js", "gp.js", "figures.js", "inside_figures.js")
READ = """([name, cx, cy, T, truth]) => {
  const m = CEMGP.loadModel(CEMSiteModels.models[name]);
  const grid = Array.from({length: CEMSiteModels.grid}, (_, k) => -1 + 2 * k / (CEMSiteModels.grid - 1));
  return CEMGP.inspect(m, cx, cy, grid, T, truth);
}"""
NUMBERS = ("posterior_mean", "posterior_sd", "prediction", "rmse_to_posterior", "rmse_to_truth", "grid")
LAYER_NUMBERS = ("prediction", "rmse_to_posterior", "rmse_to_truth", "energies", "update_norms", "step_sizes")


@pytest.fixture(scope="module")
def models_js(tmp_path_factory):
    path = tmp_path_factory.mktemp("models") / "site-models.js"
    path.write_text(site_models.models_script())
    return path


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def _page(browser, models_js, gp_js=None):
    page = browser.new_page()
    page.add_script_tag(path=str(models_js))
    for name in SCRIPTS:
        page.add_script_tag(path=str(gp_js if name == "gp.js" and gp_js else WEB / name))
    return page


@pytest.fixture(scope="module")
def page(browser, models_js):
    p = _page(browser, models_js)
    yield p
    p.close()


@pytest.fixture(scope="module")
def reference():
    """Each checkpoint in float64 (the same weights) and its task."""
    return {name: (model.double(), task) for name, (model, task) in
            ((name, load_gp_model(name)) for name in GP_MODELS)}


def _cases() -> list[tuple]:
    """(model, context x, context y, T_test or None, truth or None): 50 point sets over the five checkpoints (1 to 31
    points, a learner's own and a drawn function's, and none), then every test-time T of every checkpoint."""
    rng = np.random.default_rng(7)
    names, out = list(GP_MODELS), []
    for k in range(50):
        name, K = names[k % 5], [0, 1, 2, 3, 5, 8, 13, 21, 30, 31][k % 10]
        if k % 2:
            task = GP_MODELS[name].spec.task
            xs, ys, _, truth = sample_function_on_grid(task, 100 + k, GRID)
            out.append((name, xs[:K].tolist(), ys[:K].tolist(), None, truth.tolist()))
        else:
            out.append((name, rng.uniform(-1, 1, K).round(3).tolist(), rng.normal(0, 1.2, K).round(3).tolist(), None,
                        None))
    for name in names:
        for T in range(1, InsideControls.gp_most_T(name) + 1) if InsideControls.gp_most_T(name) > 1 else ():
            K = 1 + (T * 7) % 31
            out.append((name, rng.uniform(-1, 1, K).tolist(), rng.normal(0, 1, K).tolist(), T, None))
    return out


CASES = _cases()


def _python(reference, name, cx, cy, T, truth) -> dict:
    model, task = reference[name]
    data = inspect_function(model, task, None, T_test=T, points=list(zip(cx, cy)))
    if truth is not None:                     # a drawn function's: the truth's RMSEs as inspect_function reads them
        t = torch.tensor(truth, dtype=torch.float64)

        def rmse(p) -> float:
            return float(((torch.tensor(p, dtype=torch.float64) - t) ** 2).mean().sqrt())
        data["truth"], data["rmse_to_truth"] = truth, rmse(data["prediction"])
        for layer in data["layers"]:
            layer["rmse_to_truth"] = [rmse(p) for p in layer["prediction"]]
    return data


def _far(js, py, tol: float) -> float | None:
    """How far js is from py, relative to py's largest value (None: within tol; NaN where the other is NaN)."""
    if py is None or js is None:
        return None if py is None and js is None else math.inf
    a, b = np.asarray(js, dtype=float), np.asarray(py, dtype=float)
    if a.shape != b.shape or not np.array_equal(np.isnan(a), np.isnan(b)):
        return math.inf
    ok = ~np.isnan(b)
    scale = max(float(np.abs(b[ok]).max()) if ok.any() else 0.0, 1e-300)
    err = float(np.abs(a[ok] - b[ok]).max() / scale) if ok.any() else 0.0
    return None if err <= tol else err


def mismatches(js: dict, py: dict) -> list[str]:
    out = [f"{key}: {err:.2e}" for key in NUMBERS if (err := _far(js[key], py[key], 1e-9)) is not None]
    if len(js["layers"]) != len(py["layers"]):
        return out + [f"layers: {len(js['layers'])} against {len(py['layers'])}"]
    for k, (a, b) in enumerate(zip(js["layers"], py["layers"])):
        out += [f"layers[{k}].{key}: {err:.2e}" for key in LAYER_NUMBERS if (err := _far(a[key], b[key], 1e-9))]
        if (err := _far(a["attention"], b["attention"], 1e-5)) is not None:
            out.append(f"layers[{k}].attention: {err:.2e}")
        out += [f"layers[{k}].{key}" for key in ("name", "trained_T", "T") if a[key] != b[key]]
    return out


def test_every_checkpoint_is_read_in_the_browser_as_python_reads_it(page, reference):
    """Every readout of inspect_function, on 50 point sets and at every test-time T of every checkpoint (the case
    list's size and coverage asserted, so a shorter list cannot pass for it)."""
    assert len(CASES) >= 50 + 4 + 32 + 4 + 32
    assert {len(c[1]) for c in CASES} >= {0, 1, 31} and {c[0] for c in CASES} == set(GP_MODELS)
    problems = []
    for name, cx, cy, T, truth in CASES:
        js = page.evaluate(READ, [name, cx, cy, T, truth])
        found = mismatches(js, _python(reference, name, cx, cy, T, truth))
        problems += [f"{name}, {len(cx)} points, T {T}: {m}" for m in found]
    assert not problems, problems[:10]


def test_a_broken_formula_is_found(browser, models_js, reference, tmp_path):
    """The comparison sees a mirror that is wrong: beta off by 1e-4 in the attention scores fails it, naming the
    predictions."""
    source = (WEB / "gp.js").read_text()
    assert source.count("s[j] = beta * z;") == 1
    broken = tmp_path / "gp.js"
    broken.write_text(source.replace("s[j] = beta * z;", "s[j] = 1.0001 * beta * z;"))
    page = _page(browser, models_js, broken)
    name, cx, cy = "gp-cem-T8", [-0.5, 0.1, 0.6], [0.3, -0.8, 0.5]
    found = mismatches(page.evaluate(READ, [name, cx, cy, None, None]), _python(reference, name, cx, cy, None, None))
    assert any(m.startswith("layers[0].prediction") for m in found), found
    page.close()


def test_the_exported_weights_are_the_checkpoints_and_a_damaged_one_is_refused(tmp_path, monkeypatch):
    """site-models.js carries every weight of every checkpoint bit for bit (float32), with its card's sha256; a
    weights file that no longer matches its card is refused at build time, naming it."""
    data = json.loads(site_models.models_script().removeprefix("globalThis.CEMSiteModels = ").removesuffix(";\n"))
    assert set(data["models"]) == set(GP_MODELS)
    for name, entry in data["models"].items():
        model, _ = load_gp_model(name)
        card = json.loads((ROOT / "models" / name / "card.json").read_text())
        assert entry["weights_sha256"] == card["weights_sha256"]
        exported = [entry["in_proj"]["data"], entry["in_proj"]["bias"]]
        for layer in entry["layers"]:
            exported.append(layer["norm"])
            exported += [layer[k]["data"] for k in ("q", "k", "v", "o", "up", "gate", "down") if k in layer]
        exported += [entry["norm"], entry["head"]["data"], entry["head"]["bias"]]
        values = np.concatenate([np.frombuffer(base64.b64decode(b), "<f4") for b in exported])
        assert len(values) == sum(p.numel() for p in model.parameters()) == entry["params"]
        assert sorted(values.tolist()) == sorted(torch.cat([p.flatten() for p in model.parameters()]).tolist())
    damaged = tmp_path / "models"
    shutil.copytree(ROOT / "models", damaged)
    weights = damaged / "gp-cem-T1" / "weights.pt"
    weights.write_bytes(weights.read_bytes()[:-1] + bytes([weights.read_bytes()[-1] ^ 1]))
    monkeypatch.setenv("CEM_LAB_MODELS_DIR", str(damaged))
    with pytest.raises(ValueError, match="gp-cem-T1"):
        site_models.models_script()


def test_the_sites_functions_are_the_apps(page):
    """functions/<first>.js holds the functions the app draws for its seeds: the points exactly, the truth to
    float32; the site carries seeds 0 to SITE_SEEDS - 1 in chunks of FUNCTION_CHUNK."""
    chunks = list(site_models.function_chunks())
    assert chunks[0] == 0 and chunks[-1] + site_models.FUNCTION_CHUNK == site_models.SITE_SEEDS
    text = site_models.functions_script(500)
    chunk = json.loads(text.removeprefix("globalThis.CEMFunctions.add(").removesuffix(");\n"))
    task = GP_MODELS["gp-cem-T8"].spec.task
    xs, ys = (np.frombuffer(base64.b64decode(chunk[k]), "<f8").reshape(500, -1) for k in ("xs", "ys"))
    truth = np.frombuffer(base64.b64decode(chunk["truth"]), "<f4").reshape(500, -1)
    for k in (0, 7, 499):
        x, y, _, f = sample_function_on_grid(task, 500 + k, GRID)
        assert np.array_equal(xs[k], x.numpy()) and np.array_equal(ys[k], y.numpy())
        assert np.array_equal(truth[k], f.numpy().astype("<f4"))


@pytest.mark.parametrize("name, seed, context, T, points", [
    ("gp-cem-T8", 3, 8, None, None), ("gp-cem-T8", None, 0, None, [(0.1, 0.5), (-0.3, -1.0)]),
    ("gp-llama", 1, 5, None, None), ("gp-llama", None, 0, None, [(0.2, 0.1)]),
    ("gp-block-T8", 7, 31, 32, None), ("gp-block-T1", 2, 1, 4, None), ("gp-cem-T8", 0, 8, 3, None),
    ("gp-block-T8", None, 0, 16, [(-0.9, 1.5), (0.0, 0.0), (0.95, -2.0)])])
def test_the_browser_builds_the_figures_and_words_python_builds(page, name, seed, context, T, points):
    """CEMInside.gpFigures and gpView against inside.gp_figures and gp_view (every trace, layout and frame, the
    weights bit for bit), and the note (gp_reading, with and without a trained RMSE to compare with)."""
    model, task = load_gp_model(name)
    data = json.loads(json.dumps(inspect_function(model, task, seed, context=context, T_test=T, points=points)))
    py = inside.gp_view(data, inside.gp_figures(data, height=420), hint="h")
    js = page.evaluate("""([d]) => CEMInside.gpView(d, CEMInside.gpFigures(d, 420, "below"), CEMInside.GP_PLOTS,
                                                    1.0, "h")""", [data])
    assert view_difference(py, js) is None, view_difference(py, js)
    assert page.evaluate("([d]) => CEMInside.gpReading(d, 0.1234)", [data]) == inside.gp_reading(data, 0.1234)


POINT_TEXTS = ["", "0.5:1", "0.5:1, -0.25:-2.5e-1", "-1:0,1:0", " 0.1 : 0.2 ", "1.0001:0", "0.5", "a:b",
               "0.5:1:2", "nan:1", "0.2:inf", ",".join(f"{k / 40}:0" for k in range(32)), "0.3:1,,0.4:2", "+.5:-.5",
               "5.:1"]


def test_a_learners_points_are_read_and_refused_as_python_does(page):
    """CEMGP.parsePoints against inspect.parse_points: the same points, or the same refusal word for word."""
    task = GP_MODELS["gp-cem-T8"].spec.task
    for text in POINT_TEXTS:
        js = page.evaluate("([t, task]) => CEMGP.parsePoints(t, task)", [text, {"box": list(task.box),
                                                                                "n_points": task.n_points}])
        try:
            assert js == {"points": [list(p) for p in parse_points(text, task)]}, text
        except ValueError as err:
            assert js == {"error": str(err)}, text
