"""The page "Inside a trained model" without a browser: its controls (links, test-time T per checkpoint, refusals),
what its step playback is sent (cem_core.ui.inside), the notes it reads off the data, its lesson steps' claims on
the trained models, and (AppTest, slow) bad input of every kind: a clear message, never a traceback, and nothing
under the models' folder written."""
from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest

from cem_core.experiments.gp.trained import GP_MODELS, load_gp_model
from cem_core.ui import inside, lesson
from cem_core.ui.inside_controls import InsideControls

ROOT = Path(__file__).resolve().parents[1]
MODELS = ROOT / "models"


# -- controls ---------------------------------------------------------------------------------------------


def test_the_controls_round_trip_through_a_link_and_a_checkpoint_opens_at_its_trained_T():
    state = InsideControls(gp_model="gp-block-T8", seed=4, context=16, gp_T=32, side="lm", lm_model="lm-cem-attn-T2",
                           text="A sentence & <b>markup</b>, 100% = ünïcode?", lm_T=8, layer=1, step=5, head=3)
    assert InsideControls.from_query(state.to_query()) == state
    for name, entry in GP_MODELS.items():                  # a link naming only the checkpoint: its trained T
        opened, notes = InsideControls.from_link({"in_gp_model": name})
        assert opened.gp_T == entry.T and notes == []
    assert InsideControls.from_link({"in_lm_model": "lm-llama"})[0].lm_T == 1
    assert [InsideControls.gp_most_T(n) for n in ("gp-llama", "gp-cem-T1", "gp-cem-T8")] == [1, 4, 32]


@pytest.mark.parametrize("query,words", [
    ({"in_gp_model": "gp-cem-T1", "in_gp_T": "5"}, "must be in [1, 4] for gp-cem-T1"),
    ({"in_gp_model": "gp-llama", "in_gp_T": "2"}, "must be in [1, 1] for gp-llama"),
    ({"in_gp_model": "gp-cem-T99"}, "GP checkpoint gp-cem-T99: must be one of"),
    ({"in_lm_model": "lm-llama", "in_lm_T": "3"}, "must be in [1, 1] for lm-llama"),
    ({"in_text": "x" * 1001}, "must be a text of at most 1000 characters"),
    ({"in_context": "0"}, "must be in [1, 31]"),
])
def test_a_bad_link_is_refused_in_the_pages_words(query, words):
    with pytest.raises(ValueError) as err:
        InsideControls.from_link(query)
    assert words in InsideControls.explain(err.value)


def test_settle_brings_the_test_time_T_within_what_the_checkpoint_offers():
    values = InsideControls().values() | {"gp_model": "gp-cem-T1", "gp_T": 20, "lm_model": "lm-llama", "lm_T": 8,
                                          "step": 8}
    settled, notes = InsideControls.settle(values)
    assert settled["gp_T"] == 4 and settled["lm_T"] == 1 and settled["step"] == 1
    assert any("gp-cem-T1 offers T up to 4" in n for n in notes)
    InsideControls.from_values(**settled)                                 # the settled state is accepted
    assert InsideControls.settle(InsideControls().values()) == (InsideControls().values(), [])


def test_an_empty_text_is_a_state_the_page_explains_not_a_refused_link():
    assert InsideControls.from_link({"in_text": ""})[0].text == ""


# -- what the playback is sent ----------------------------------------------------------------------------


def _data(T: int = 3, K: int = 2, G: int = 5, diverge: bool = False) -> dict:
    """inspect_function's shape, made up: the prediction after step t is t everywhere, the posterior mean 0."""
    grid = np.linspace(-1, 1, G).tolist()
    prediction = [[float(t)] * G for t in range(T + 1)]
    rmse = [float(t) for t in range(T + 1)]
    energies = [[-float(t + i) for i in range(K + 1)] for t in range(T + 1)]
    if diverge:
        prediction[-1] = [math.nan] * G
        rmse[-1] = math.nan
        energies[-1] = [-math.inf] * (K + 1)
    layer = {"name": "block 1 · attention", "trained_T": 2, "T": T, "prediction": prediction,
             "rmse_to_posterior": rmse, "rmse_to_truth": [r + 0.5 for r in rmse], "energies": energies,
             "update_norms": [[1.0] * (K + 1)] * T, "step_sizes": [1.0] * T,
             "attention": [[np.tril(np.ones((K + 1, K + 1))).tolist()] for _ in range(T)]}
    return {"seed": 0, "context": K, "trained_T": 2, "T_test": T, "context_x": [-0.5, 0.5][:K],
            "context_y": [0.1, -0.1][:K], "grid": grid, "truth": [0.2] * G, "posterior_mean": [0.0] * G,
            "posterior_sd": [0.3] * G, "prediction": prediction[-1], "rmse_to_posterior": rmse[-1],
            "rmse_to_truth": rmse[-1] + 0.5, "layers": [layer]}


def test_every_step_moves_the_curve_the_cursors_and_the_heatmap_to_that_step():
    data = _data()
    args = inside.gp_view(data, inside.gp_figures(data))
    assert [f["name"] for f in args["figures"]] == list(inside.GP_PLOTS) and args["steps"] == 3
    assert len(args["frames"]) == 4 and args["start"] == 3
    for t, frame in enumerate(args["frames"]):
        curve = next(u for u in frame if u["figure"] == "curve")
        assert curve["y"] == [float(t)] * 5 and f"after step {t} of 3" in curve["title"]
        rmse = next(u for u in frame if u["figure"] == "rmse" and u["meta"] == "now")
        assert rmse["x"] == [t, t] and rmse["y"] == [t, t + 0.5]
        heat = next(u for u in frame if u["figure"] == "heatmap")
        assert heat["z"] == {"array": "weights", "index": max(t, 1) - 1}
    assert args["arrays"]["weights"]["shape"] == [3, 3, 3]
    json.dumps(args, allow_nan=False)                                     # what the browser can parse
    shown = inside.gp_view(data, inside.gp_figures(data), ("curve", "rmse"))
    assert [f["name"] for f in shown["figures"]] == ["curve", "rmse"]
    assert {u["figure"] for frame in shown["frames"] for u in frame} == {"curve", "rmse"}
    assert shown["version"] != args["version"] != inside.gp_view(_data(T=4), inside.gp_figures(_data(T=4)))["version"]


def test_a_diverging_descent_reaches_the_browser_as_gaps_not_as_nan():
    data = _data(diverge=True)
    args = inside.gp_view(data, inside.gp_figures(data))
    text = json.dumps(args, allow_nan=False)                              # raises on NaN or inf
    assert "NaN" not in text and "Infinity" not in text
    assert next(u for u in args["frames"][-1] if u["figure"] == "curve")["y"] == [None] * 5
    assert "lost (not a number) from step 3 on" in inside.gp_reading(data)


def test_a_pinned_checkpoint_is_drawn_beside_with_both_names():
    data, other = _data(), _data(T=1)
    figures = inside.gp_figures(data, other, ("gp-block-T8, T 3", "gp-llama"))
    names = [t.name for f in ("curve", "rmse") for t in figures[f].data]
    assert "pinned: gp-llama" in names and "now: gp-block-T8, T 3" in names
    llama = _data(T=1) | {"layers": []}
    rmse = inside.gp_figures(data, llama, ("a", "b"))["rmse"]
    level = next(t for t in rmse.data if t.name == "pinned: b")
    assert list(level.y) == [llama["rmse_to_posterior"]] * 2              # a model without steps: one level


def test_the_reading_says_what_the_steps_and_the_extra_steps_do():
    towards = _data() | {"trained_T": 3}
    towards["layers"][0]["rmse_to_posterior"] = [1.0, 0.6, 0.3, 0.2]
    assert inside.carried(towards["layers"][0]) == "towards"
    assert "carry the prediction towards the posterior mean" in inside.gp_reading(towards)
    hurt = _data()                                          # trained T = 2, shown at T = 3: 2 -> 3 is worse
    assert inside.carried(hurt["layers"][0]) == "away" and "**hurt** here: 3.000 at T = 3 against 2.000 at T = 2" \
        in inside.gp_reading(hurt)
    early = _data(T=1)
    early["layers"][0]["rmse_to_posterior"] = [1.0, 0.99]
    text = inside.gp_reading(early, trained_rmse=0.5)
    assert "barely move the prediction" in text and "Fewer steps than trained" in text and "hurts" in text
    assert "no in-layer steps" in inside.gp_reading(_data() | {"layers": []})


def test_the_held_out_reading_names_the_interval_and_a_divergence():
    study = {"functions": 256, "trained_T": 2, "T": [1, 2, 3],
             "by_T": [{"mean": 1.3, "se": 0.01}, {"mean": 1.2, "se": 0.01}, {"mean": math.nan, "se": math.nan}],
             "vs_trained": [{"n": 256, "mean": 0.1, "se": 0.01, "low": 0.08, "high": 0.12},
                            {"n": 256, "mean": 0.0, "se": 0.0, "low": 0.0, "high": 0.0},
                            {"n": 256, "mean": math.nan, "se": math.nan, "low": math.nan, "high": math.nan}]}
    assert "1.300 ± 0.010" in inside.scaling_words(study, 1) and "higher than at the trained T = 2" in \
        inside.scaling_words(study, 1)
    assert "the iterates diverge" in inside.scaling_words(study, 3)


# -- the language model's views ---------------------------------------------------------------------------


def test_tokens_are_coloured_by_their_loss_and_shown_as_text_not_markup():
    page = inside.loss_html(["<", "b", "&"], ["b", "&", "␣"], [0.0, 3.0, 60.0])
    assert "&lt;" in page and "&amp;" in page and "<b>" not in page
    assert inside.loss_colour(0.0) == "rgba(214,39,40,0.05)" and inside.loss_colour(60.0) == "rgba(214,39,40,0.85)"


def test_the_lens_table_reads_the_step_asked_for_and_llama_beside_it():
    data = {"tokens": ["a", "b"], "targets": ["b", "c"],
            "final": {"loss": [0.5, 0.25], "top": [[["b", 0.6]], [["c", 0.7]]]},
            "layers": [{"loss": [[2.0, 2.0], [1.0, 0.75]], "top": [[[["x", 0.1]], [["y", 0.1]]],
                                                                     [[["b", 0.3]], [["c", 0.4]]]]}]}
    rows = inside.lens_rows(data, 0, 1, llama=data)
    assert rows[1] == {"position": 1, "token": "b", "next": "c", "loss": 0.75, "top 5": "c 0.40",
                       "Llama loss": 0.25, "Llama top 5": "c 0.70"}
    assert inside.lens_rows(data, None, 0)[0]["top 5"] == "b 0.60"


def test_sample_sentences_are_short_plain_and_in_the_texts_order():
    docs = ["Title\n*****\n\nA first sentence that is long enough here. Too short. Another plain sentence of the "
            "text follows here!\n\n   code ::= 'x'", "A first sentence that is long enough here. " + "Word " * 40 + "."]
    assert inside.sample_sentences(docs) == ["A first sentence that is long enough here.",
                                             "Another plain sentence of the text follows here!"]
    assert inside.sample_sentences(docs, count=1) == ["A first sentence that is long enough here."]


# -- the lesson's steps on the trained models ---------------------------------------------------------------


def _inspected(step) -> dict:
    from cem_core.experiments.gp.inspect import inspect_function

    controls = step.controls()
    model, task = load_gp_model(controls.gp_model, MODELS)
    return inspect_function(model, task, controls.seed, controls.context, controls.gp_T)


def test_the_lessons_inside_steps_say_what_the_trained_model_does():
    steps = [s for s in lesson.STEPS if s.page == "inside"]
    assert {s.carries for s in steps} >= {"towards", "away"}                # one refines, one does not
    for step in steps:
        data = _inspected(step)
        assert lesson.inside_problems(step, data) == [], (step.title, lesson.state_link(step))
        assert step.controls().gp_T <= InsideControls.gp_most_T(step.controls().gp_model)
        if step.carries == "away":                      # its words: within four more steps, worse than step 0
            r, trained = data["layers"][0]["rmse_to_posterior"], data["trained_T"]
            assert "within four more steps it is further from it than at step 0" in step.say
            assert r[trained + 4] > r[0] > r[trained] and "**hurt**" in inside.gp_reading(data)


def test_the_inside_checker_can_fail():
    step = next(s for s in lesson.STEPS if s.carries == "towards")
    assert lesson.inside_problems(step, _data())                           # a made-up descent that moves away
    with pytest.raises(ValueError, match="carries"):
        lesson.Step("x", "y", page="inside", views=("curve", "rmse"))


# -- bad input on the page (AppTest) -------------------------------------------------------------------------


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def models_copy(tmp_path, monkeypatch):
    """A copy of the GP checkpoints and one language model, the page pointed at it (CEM_LAB_MODELS_DIR)."""
    folder = tmp_path / "models"
    for name in ("gp-cem-T8", "gp-block-T8", "gp-llama", "gp-cem-T1", "lm-cem-attn-T2"):
        shutil.copytree(MODELS / name, folder / name)
    monkeypatch.setenv("CEM_LAB_MODELS_DIR", str(folder))
    return folder


def _page(query: dict):
    from conftest import run_page

    at = run_page("inside", query)
    assert not at.exception, at.exception
    return at, " ".join(e.value for e in at.error)


@pytest.mark.slow
def test_bad_input_gives_a_clear_message_and_writes_nothing(models_copy):
    from conftest import shown

    (models_copy / "gp-cem-T1" / "weights.pt").write_bytes(b"not a checkpoint")   # damaged
    card = json.loads((models_copy / "gp-llama" / "card.json").read_text())
    (models_copy / "gp-llama" / "card.json").write_text(json.dumps(card | {"config_hash": "0" * 12}))  # stale
    before = _snapshot(models_copy)
    cases = [({}, None),                                                   # the defaults: no error
             ({"in_gp_model": "gp-nope"}, "The link's settings could not be used: GP checkpoint gp-nope"),
             ({"in_gp_model": "gp-block-T1"}, "gp-block-T1/card.json is missing"),
             ({"in_gp_model": "gp-cem-T1"}, "weights.pt is damaged (its sha256 differs from the card's)"),
             ({"in_gp_model": "gp-llama"}, "was trained under another configuration"),
             ({"in_side": "lm", "in_lm_model": "lm-cem-attn-T2", "in_text": ""}, "text is empty"),
             ({"in_side": "lm", "in_lm_model": "lm-cem-attn-T2", "in_text": "x" * 200}, "text is too long: 200 tokens"),
             ({"in_side": "lm", "in_lm_model": "lm-cem-full"}, "lm-cem-full/card.json is missing")]
    for query, words in cases:
        at, errors = _page(query)
        if words is None:
            assert errors == "" and at.info, query
        else:
            assert words in shown(errors), (query, errors)
            assert "Traceback" not in errors and "Something went wrong" not in errors, errors
    assert _snapshot(models_copy) == before                                # read, never written


@pytest.mark.slow
def test_a_lesson_step_shows_no_pin_of_the_readers_and_end_gives_it_back():
    """A lesson step on the inside page sets its whole state: a checkpoint the reader pinned before is not drawn
    beside it (the step would show something else than its link), and End gives the pin back."""
    at, _ = _page({})
    mine = InsideControls(gp_model="gp-llama", gp_T=1).values()
    at.session_state["_pinned_inside"] = mine
    at.query_params["lesson"] = str(next(i for i, s in enumerate(lesson.STEPS) if s.page == "inside") + 1)
    at.run()
    assert not at.exception and at.session_state["_pinned_inside"] is None
    assert not [b for b in at.button if b.label == "Unpin"]
    next(b for b in at.button if b.key == "lesson-end").click().run()
    assert not at.exception and at.session_state["_pinned_inside"] == mine
