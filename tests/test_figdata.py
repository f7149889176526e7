"""Figure data (cem_core.ui.figdata) is what it claims to be, and `make figures` writes every figure
that figures/README.md lists."""
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import tiny_gp_specs, tiny_study_specs

from cem_core import LanguageModel, ModelConfig
from cem_core.__main__ import main
from cem_core.experiments.gp import sweep as gp_sweep
from cem_core.experiments.lm import runner
from cem_core.nn.config import CEMOptions
from cem_core.ui import figdata

ROOT = Path(__file__).resolve().parents[1]

README = Path(__file__).resolve().parents[1] / "figures" / "README.md"


# -- energy descent --------------------------------------------------------------------------------


def test_energy_descent_is_the_layer_trace():
    data = figdata.energy_descent(T=6, eta=0.5, anchors=(0.0, 1.0), d_model=8, n_heads=2, n_tokens=4, seed=3)
    h = figdata.descent_input(4, 8, seed=3)
    for anchor, run in data["runs"].items():
        trace = figdata.attention_layer(8, 2, CEMOptions(T=6, eta=0.5, anchor=anchor), seed=3).trace(h)
        np.testing.assert_allclose(run["energy"], trace.energies[:, 0].numpy(), rtol=1e-12)
        np.testing.assert_allclose(run["radius"], trace.iterates[:, 0].norm(dim=-1).numpy(), rtol=1e-12)
    assert list(data["t"]) == list(range(7))
    plain, anchored = data["runs"][0.0], data["runs"][1.0]
    assert (np.diff(plain["energy"], axis=0) < 0).all()                  # concave: every step descends
    assert (anchored["update_norm"][-1] < 0.1 * anchored["update_norm"][0]).all()


def test_figure_data_leaves_the_global_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    figdata.energy_descent(T=2, d_model=4, n_heads=1, n_tokens=3)
    figdata.preconditioner_spectra(d_model=4, rank=2)
    assert torch.equal(torch.rand(3), expected)


# -- energy landscape ------------------------------------------------------------------------------

LANDSCAPES = [dict(d_model=2, n_heads=1, T=4, n_tokens=4, grid=9, seed=1),
              dict(d_model=8, n_heads=2, T=4, n_tokens=5, token=2, grid=9, seed=2, anchor=0.5)]


def _layer_and_input(kwargs):
    cem = CEMOptions(T=kwargs["T"], eta=0.5, anchor=kwargs.get("anchor", 0.0))
    layer = figdata.attention_layer(kwargs["d_model"], kwargs["n_heads"], cem, weight_scale=3.0, seed=kwargs["seed"])
    return layer, figdata.descent_input(kwargs["n_tokens"], kwargs["d_model"], kwargs["seed"])


@pytest.mark.parametrize("kwargs", LANDSCAPES, ids=["width2", "width8"])
def test_landscape_energies_are_the_layer_energy_at_the_grid_points(kwargs):
    data = figdata.energy_landscape(**kwargs)
    layer, h = _layer_and_input(kwargs)
    i = data["token"]
    for k, j in [(0, 0), (4, 7), (8, 2), (8, 8)]:
        x = layer.norm(h).detach().clone()
        x[0, i] = torch.from_numpy(data["origin"] + data["a"][j] * data["basis"][0] + data["b"][k] * data["basis"][1])
        assert float(layer.energy(x, h)[0, i].detach()) == pytest.approx(data["energy"][k, j], rel=1e-12)


@pytest.mark.parametrize("kwargs", LANDSCAPES, ids=["width2", "width8"])
def test_landscape_trajectory_starts_at_x0_on_an_orthonormal_plane(kwargs):
    data = figdata.energy_landscape(**kwargs)
    layer, h = _layer_and_input(kwargs)
    x0 = layer.norm(h)[0, data["token"]].detach().numpy()
    np.testing.assert_allclose(data["origin"] + data["trajectory"][0] @ data["basis"], x0, atol=1e-12)
    np.testing.assert_allclose(data["basis"] @ data["basis"].T, np.eye(2), atol=1e-12)
    iterates = layer.trace(h).iterates[:, 0, data["token"]].numpy()
    in_plane = data["origin"] + data["trajectory"] @ data["basis"]      # the iterates projected on the plane
    np.testing.assert_allclose(np.linalg.norm(iterates - in_plane, axis=1), data["off_plane"], atol=1e-12)
    assert data["off_plane"][:3].max() < 1e-12                           # x^(0), x^(1), x^(2) span the plane
    if kwargs["d_model"] == 2:
        assert data["off_plane"].max() == 0                              # width 2: the true plane


def test_first_step_is_the_attention_weighted_mix_of_key_tips():
    """One head, P = I: x^(1) = x^(0) + eta sum_j a_ij A c_j = sum_j a_ij (x^(0) + eta A c_j)."""
    kwargs = LANDSCAPES[0]
    data = figdata.energy_landscape(**kwargs)
    layer, h = _layer_and_input(kwargs)
    i = data["token"]
    a = layer.trace(h).weights[0, 0, 0, i, : i + 1].numpy()              # step 0, batch 0, head 0
    np.testing.assert_allclose(a @ data["key_tips"][0], data["trajectory"][1], atol=1e-12)


# -- preconditioners and parameter counts ----------------------------------------------------------


def test_dlr_spectrum_goes_negative_while_psd_stays_positive():
    spectra = figdata.preconditioner_spectra(d_model=12, rank=3, seed=0)
    assert spectra["dlr"].shape == spectra["psd"].shape == (12,)
    assert spectra["dlr"].min() < 0
    assert spectra["psd"].min() >= 1 - 1e-6                             # D = I plus a psd U U^T
    assert (np.diff(spectra["dlr"]) >= 0).all()                          # sorted


def test_parameter_counts_match_the_built_models():
    sizes = dict(d_model=16, n_layers=2, n_heads=2, d_ff=40, vocab_size=50)
    data = figdata.parameter_counts(**sizes)
    assert data["variants"] == list(figdata.COUNT_VARIANTS)
    for k, (variant, cem) in enumerate(figdata.COUNT_VARIANTS.values()):
        model = LanguageModel(ModelConfig.variant(variant, cem=cem, **sizes))
        built = model.param_breakdown()
        assert built["total"] == data["total"][k] == sum(part[k] for part in data["parts"].values())
        assert data["parts"]["attention"][k] == sum(v for name, v in built.items() if name.startswith("attention."))
    llama, cem_attn, cem_mlp = (data["variants"].index(v) for v in ("llama", "cem-attn", "cem-mlp"))
    attention, mlp = data["parts"]["attention"], data["parts"]["mlp"]
    assert attention[cem_attn] == attention[llama] / 2                   # 2d^2 vs 4d^2 (no extras)
    assert mlp[cem_mlp] == mlp[llama] * 2 / 3                            # 2 d d_ff vs 3 d d_ff


def test_the_design_page_says_how_its_defaults_relate_to_make_info(capsys):
    """The design page's table at its defaults differs from `make info`'s without a word: same sizes,
    other CEM switches. Its note names the sizes and both switch sets, and every total and KV ratio it quotes
    for `make info` is the one `make info` prints (its command read from the Makefile)."""
    import shlex

    from cem_core.nn.model import VARIANTS
    from cem_core.ui.design_controls import DesignControls

    line = next(x for x in (ROOT / "Makefile").read_text().splitlines() if "-m cem_core info" in x)
    assert main(shlex.split(line.split("-m cem_core ", 1)[1])) == 0
    out = capsys.readouterr().out.splitlines()
    header = re.split(r"\s{2,}", out[0].strip())
    printed = {row.split()[0]: dict(zip(header, row.split())) for row in out
               if row.split() and row.split()[0] in VARIANTS}
    defaults = DesignControls()
    configs = {name: defaults.model_config(name) for name in VARIANTS}
    note = figdata.info_comparison(configs)
    shape = defaults.shape
    assert (f"d_model {shape.d_model}, {shape.n_layers} layers, {shape.n_heads} heads, d_ff {shape.d_ff}, "
            f"vocabulary {defaults.vocab_size:,}; `make info`") in note
    assert [f"--{k.replace('_', '-')} {v}" in line for k, v in shape.shape_fields().items() if k != "activation"] \
        == [True] * 4                                                    # the same sizes, as the note says
    assert "by default preconditioner psd, rank 4" in note and "cem-full: T = 2, diagonal shared" in note
    page = {r["variant"]: r for r in figdata.variant_table(configs)}
    quoted = 0
    for name in VARIANTS:
        if f"{int(page[name]['total']):,}" != printed[name]["total"]:
            assert f"{name} {page[name]['total']:,} here, {printed[name]['total']} there" in note
            quoted += 1
        if f"{page[name]['KV x llama']:.3f}" != printed[name]["KV x llama"]:
            there = float(printed[name]["KV x llama"])
            assert f"{page[name]['KV x llama']:.2f}× Llama's here, {there:.2f}× there" in note
            quoted += 1
    assert quoted == 4                                                   # three totals and cem-full's cache


def test_the_design_tables_keep_every_column():
    from cem_core.nn.model import VARIANTS
    from cem_core.ui.design_controls import DesignControls

    rows = figdata.variant_table({name: DesignControls().model_config(name) for name in VARIANTS})
    parts, ratios = figdata.variant_tables(rows)
    assert set(parts[0]) | {k.split(" (")[0] for k in ratios[0]} == set(rows[0])
    assert parts[0]["total"] == "109,529,856" and ratios[3]["KV x llama"] == "0.500"


def test_log2_axes_label_their_ticks_with_the_numbers():
    """The test-time scaling plot's last tick read "2x10" for T = 16 (Plotly's power-of-ten labels at
    dtick log10(2)). Every log2 axis of the GP page labels a tick at each power of two of its data as the number."""
    from cem_core.ui import gp_figures

    records = gp_sweep.GP_SWEEP.load(ROOT / gp_sweep.COMMITTED_GP_SWEEP / "results.json")
    for build in (gp_figures.gp_scaling_figure, gp_figures.gp_ratio_figure):
        fig = build(records)
        xs = sorted({x for trace in fig.data for x in (trace.x or ()) if x is not None and x > 0})
        axis = fig.layout.xaxis
        assert axis.type == "log" and axis.tickmode == "array"
        assert list(axis.ticktext) == [str(int(v)) for v in axis.tickvals]
        assert axis.tickvals[0] <= xs[0] and axis.tickvals[-1] >= xs[-1]
    assert list(gp_figures.gp_scaling_figure(records).layout.xaxis.ticktext) == ["1", "2", "4", "8", "16"]


@pytest.mark.slow                      # draws the three study figures
def test_the_app_s_study_figures_have_legible_text():
    """The study figures' legends were about 7 px as the GP page shows them. In the app's form every text
    is at least APP_TEXT_PX when the figure is APP_IMAGE_PX wide (a browser test checks the page shows them at
    least that wide); the wide form (figures/) would not be."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from cem_core.experiments.gp import study as gp_study
    from cem_core.ui import study_plots

    records = gp_sweep.GP_SWEEP.load(ROOT / gp_study.COMMITTED_STUDY / "results.json")
    for name in study_plots.GP_STUDY_FIGURES:
        fig = study_plots.app_study_figure(name, records)
        assert study_plots.displayed_text_px(fig) >= study_plots.APP_TEXT_PX, name
        assert "d_x" not in " ".join(t.get_text() for t in fig.findobj(matplotlib.text.Text))   # d$_x$: subscript
        wide = study_plots.GP_STUDY_FIGURES[name](records)
        assert study_plots.displayed_text_px(wide) < 8, name
        plt.close(fig)
        plt.close(wide)


def test_the_live_gp_result_is_set_beside_the_sweep_from_the_configs():
    from cem_core.nn.config import CEMOptions, ModelShape
    from cem_core.ui.gp_controls import GPControls

    records = gp_sweep.GP_SWEEP.load(ROOT / gp_sweep.COMMITTED_GP_SWEEP / "results.json")
    c = GPControls()
    ref = next(s for s in gp_sweep.gp_preset_runs("default") if s.group == "depth1" and s.model.attention == "cem")
    runs = [r["rmse_ratio"] for r in records if r["group"] == "depth1" and r["attention"] == "cem"
            and r["T"] == c.cem.T and r["diagonal"] == "none"]
    note = gp_sweep.live_comparison(records, c.task(), c.model(), c.train())
    assert f"reaches {np.mean(runs):.2f} (mean of {len(runs)} seeds)" in note
    assert (f"width {c.shape.d_model} vs {ref.model.shape.d_model}, d_ff {c.shape.d_ff} vs {ref.model.shape.d_ff}, "
            f"training steps {c.steps} vs {ref.train.steps:,}") in note and "1 seed vs 3" in note
    assert "fewer steps usually" in note
    odd = GPControls(cem=CEMOptions(T=3), kernel="periodic", shape=ModelShape(d_model=64, n_heads=4, d_ff=128,
                                                                              n_layers=1))
    note = gp_sweep.live_comparison(records, odd.task(), odd.model(), odd.train())
    assert "has no depth-1 CEM run at T = 3" in note and "kernel periodic vs rbf" in note
    assert "width" not in note and "usually" not in note


# -- make figures ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_make_figures_writes_every_figure_the_readme_lists(tmp_path):
    """`make figures` runs this command on the committed sweep; a two-run sweep stands in for it here,
    so the test does not depend on how far the real sweep has got."""
    listed = set(re.findall(r"`([A-Za-z0-9_]+\.(?:png|svg))`", README.read_text()))
    assert len(listed) >= 22
    gp_sweep.run_gp_sweep(tmp_path / "gp", tiny_gp_specs())
    runner.run_sweep(tmp_path / "lm", "quick")
    gp_sweep.run_gp_sweep(tmp_path / "study", tiny_study_specs(["long", "eta per step"], seeds=(0,)))
    out = tmp_path / "figures"
    assert main(["figures", "--out", str(out), "--gp-results", str(tmp_path / "gp" / "results.json"),
                 "--lm-results", str(tmp_path / "lm" / "results.json"),
                 "--ladder-results", str(tmp_path / "lm" / "results.json"),       # one width: points, no line
                 "--budget-ladder-results", str(tmp_path / "lm" / "results.json"),
                 "--gp-study-results", str(tmp_path / "study" / "results.json"),
                 "--tie-ladder-results", str(ROOT / "results" / "lm-tie-ladder" / "results.json"),
                 "--gp-test-time-results", str(ROOT / "results" / "gp-test-time" / "results.json"),
                 "--lm-test-time-results", str(ROOT / "results" / "lm-test-time" / "results.json"),
                 "--models", str(ROOT / "models")]) == 0                          # the committed trained models
    written = {p.name for p in out.iterdir()}
    assert written == listed
    assert all((out / name).stat().st_size > 1000 for name in written)


# -- the worked example of notebook 01 -------------------------------------------------------------


def test_worked_example_update_is_minus_the_energy_gradient():
    """u = sum_j a_j W_Q^T W_K c_j equals -grad_x of E(x) = -(1/beta) log sum_j exp(beta (W_Q x)^T W_K c_j),
    by autograd in float64, for random weights, history and temperature."""
    rng = np.random.default_rng(3)
    w_q, w_k, history = rng.normal(size=(3, 4)), rng.normal(size=(3, 4)), rng.normal(size=(5, 4))
    data = figdata.worked_example(w_q, w_k, history, token=3, beta=0.7)
    x = torch.tensor(history[3], requires_grad=True)
    scores = torch.tensor(history[:4] @ w_k.T) @ (torch.tensor(w_q) @ x)
    energy = -torch.logsumexp(0.7 * scores, 0) / 0.7
    energy.backward()
    assert np.allclose(data["update"], -x.grad.numpy(), rtol=1e-12, atol=1e-12)
    assert np.isclose(data["weights"].sum(), 1.0) and data["keys"].shape == (4, 3)


def test_worked_example_hull_is_the_convex_hull():
    from scipy.spatial import ConvexHull

    rng = np.random.default_rng(0)
    for n in (3, 5, 9):
        points = rng.normal(size=(n, 2))
        hull = figdata._convex_hull(points)
        expected = points[ConvexHull(points).vertices]                  # counter-clockwise too
        start = int(np.argmin(np.abs(expected - hull[0]).sum(1)))
        assert np.allclose(np.roll(expected, -start, axis=0), hull)
