"""The app headless (AppTest): every page on defaults and after changing each control, links,
teacher mode, and the validator over the full grid of control values."""
import itertools
from dataclasses import fields

import pytest
from conftest import APP_PAGES, run_page
from streamlit.testing.v1 import AppTest

from cem_core.ui.controls import EnergyControls
from cem_core.ui.design_controls import DesignControls
from cem_core.ui.gp_controls import GPControls

pytestmark = pytest.mark.slow          # every test runs whole app pages (AppTest)

PAGES = APP_PAGES


def assert_clean(at: AppTest) -> None:
    assert not at.exception, at.exception
    assert not at.error, [e.value for e in at.error]


@pytest.mark.parametrize("page", list(PAGES))
def test_page_on_defaults(page):
    at = run_page(page)
    assert_clean(at)
    assert at.title[0].value


def _widget(at, key):
    for kind in ("slider", "select_slider", "number_input", "selectbox", "radio", "toggle", "multiselect"):
        for w in getattr(at, kind):
            if w.key == key:
                return w
    raise KeyError(key)


# (page, widget key, new value): every control of every page, moved to a valid extreme
CHANGES = [
    ("energy", "en_layer", "mlp"), ("energy", "en_layer", "block"), ("energy", "en_T", 16), ("energy", "en_T", 1),
    ("energy", "en_eta", 20.0), ("energy", "en_eta", 0.05), ("energy", "en_anchor", 5.0),
    ("energy", "en_p_scale", 3.0, {"preconditioner": "dlr"}),
    ("energy", "en_diagonal", "per_head"), ("energy", "en_diagonal", "shared"),
    ("energy", "en_preconditioner", "dlr"), ("energy", "en_preconditioner", "psd"),
    ("energy", "en_rank", 8, {"preconditioner": "psd"}),
    ("energy", "en_heads", 8), ("energy", "en_width", 2), ("energy", "en_width", 64), ("energy", "en_seq_len", 2),
    ("energy", "en_seq_len", 48), ("energy", "en_seed", 9999), ("energy", "en_rope", True), ("energy", "teacher", True),
    ("energy", "en_token", 3), ("energy", "en_heat_head", 1),
    ("design", "ds_d_model", 1536), ("design", "ds_n_layers", 1), ("design", "ds_n_heads", 16),
    ("design", "ds_d_ff", 8),
    ("design", "ds_vocab_size", 2), ("design", "ds_seq_len", 1), ("design", "ds_T", 16),
    ("design", "ds_diagonal", "shared"), ("design", "ds_preconditioner", "dlr"), ("design", "ds_rank", 64),
    ("design", "ds_p_scale", 3.0), ("design", "ds_seed", 5), ("design", "teacher", True),
    ("gp", "gp_kernel", "periodic"), ("gp", "gp_kernel", "matern52"), ("gp", "gp_seed", 9999), ("gp", "gp_context", 0),
    ("gp", "gp_context", 32), ("gp", "gp_T", 8), ("gp", "gp_diagonal", "shared"), ("gp", "gp_steps", 50),
    ("gp", "teacher", True),
    ("lm", "lm_variants", ["cem-attn", "cem-mlp"]), ("lm", "lm_data", "slimpajama"), ("lm", "teacher", True),
    ("inside", "in_gp_model", "gp-llama"), ("inside", "in_gp_model", "gp-block-T1"), ("inside", "in_gp_T", 32),
    ("inside", "in_seed", 9999), ("inside", "in_context", 31), ("inside", "in_side", "lm"), ("inside", "teacher", True),
    ("inside", "in_lm_T", 8, {"in_side": "lm"}), ("inside", "in_lm_model", "lm-llama", {"in_side": "lm"}),
    ("inside", "in_layer", 3, {"in_side": "lm"}), ("inside", "in_step", 0, {"in_side": "lm"}),
    ("inside", "in_head", 3, {"in_side": "lm"}),
]


@pytest.mark.parametrize("page,key,value,query", [(*change, {})[:4] for change in CHANGES])
def test_page_after_changing_a_control(page, key, value, query):
    """(A control shown only in some states, like the preconditioner's rank, is moved in such a state.)"""
    at = run_page(page, query)
    _widget(at, key).set_value(value).run()
    assert_clean(at)
    assert _widget(at, key).value == value
    if key != "teacher":
        url_key = key.split("_", 1)[1] if page == "energy" else key
        expected = (",".join(value) if isinstance(value, list) else str(value).lower() if isinstance(value, bool)
                    else str(value))
        assert at.query_params[url_key] == expected


def test_teacher_mode_adds_explanations():
    plain = run_page("energy")
    teacher = run_page("energy", {"teacher": "true"})
    assert_clean(teacher)
    assert len(teacher.info) >= len(plain.info) + 2


def test_a_link_restores_the_view():
    at = run_page("energy", {"layer": "block", "T": "9", "diagonal": "shared", "seed": "3"})
    assert_clean(at)
    assert _widget(at, "en_T").value == 9 and _widget(at, "en_layer").value == "block"
    assert _widget(at, "en_diagonal").value == "shared" and _widget(at, "en_seed").value == 3
    gp = run_page("gp", {"gp_kernel": "periodic", "gp_T": "5"})
    assert _widget(gp, "gp_kernel").value == "periodic" and _widget(gp, "gp_T").value == 5
    lm = run_page("lm", {"lm_variants": "llama,cem-mlp", "lm_data": "demo"})
    assert_clean(lm)
    assert _widget(lm, "lm_variants").value == ["llama", "cem-mlp"]
    bad = run_page("lm", {"lm_variants": "llama,gpt"})
    assert any("could not be used" in e.value for e in bad.error) and not bad.exception


@pytest.mark.parametrize("query", [{"T": "banana"}, {"T": "99"}, {"layer": "lstm"}, {"width": "7"}])
def test_a_bad_link_shows_an_error_and_the_defaults(query):
    at = run_page("energy", query)
    assert not at.exception
    assert any("could not be used" in e.value for e in at.error)
    assert _widget(at, "en_T").value == EnergyControls().cem.T


def test_train_a_small_model_now():
    at = run_page("gp")
    _widget(at, "gp_steps").set_value(50).run()
    next(b for b in at.button if "Train" in b.label).click().run()
    assert_clean(at)
    assert any("held-out RMSE" in s.value for s in at.success)
    result = next(s.value for s in at.success if "held-out RMSE" in s.value)
    # the live ratio beside the sweep's, with the settings that differ read from both configs
    from cem_core.experiments.gp import sweep as gp_sweep

    live = GPControls(steps=50)
    reference = next(s for s in gp_sweep.gp_preset_runs("default") if s.group == "depth1"
                     and s.model.attention == "cem" and s.model.cem.T == live.cem.T)
    assert f"The committed sweep's depth-1 CEM at T = {live.cem.T}, diagonal none reaches " in result
    assert f"width {live.shape.d_model} vs {reference.model.shape.d_model}" in result
    assert f"training steps 50 vs {reference.train.steps:,}" in result


def test_the_study_images_say_what_they_show():
    """Each study figure has a caption and an alt text (none had either)."""
    from cem_core.ui import study_plots

    at = run_page("gp")
    assert_clean(at)
    images = [n for n in at.main.children.values() if n.type == "image"]
    assert len(images) == 3
    shown = [(img.caption, img.alt) for node in images for img in node.proto.imgs]
    assert [caption for caption, _ in shown] == [study_plots.STUDY_CAPTIONS[name][0]
                                                 for name in study_plots.GP_STUDY_FIGURES]
    assert all(len(alt) > 80 for _, alt in shown) and "d_x = 2" in shown[0][1]


# -- the validator over the full grid -------------------------------------------------------


def grid_values(cls):
    """Every option, and each numeric control at its minimum and maximum."""
    specs = cls.SHAPE | cls.SPECS
    axes = []
    for name, (kind, allowed) in specs.items():
        axes.append(allowed if kind == "choice" else (False, True) if kind == "bool" else allowed)
    return list(specs), itertools.product(*axes)


@pytest.mark.parametrize("cls", [EnergyControls, DesignControls, GPControls])
def test_validator_over_the_full_grid(cls):
    names, combos = grid_values(cls)
    built = refused = 0
    for combo in combos:
        try:
            controls = cls.from_values(**dict(zip(names, combo)))
        except ValueError as err:
            refused += 1
            field = str(err).split("=", 1)[0]
            assert field in {f.name for f in fields(cls)} | {"d_model", "n_heads", "rank", *cls.SHAPE}, str(err)
            assert "is invalid:" in str(err)
            continue
        built += 1
        if cls is EnergyControls:
            controls.attention_config(), controls.mlp_config()
        elif cls is DesignControls:
            [controls.model_config(v) for v in ("llama", "cem-full")]
        else:
            controls.task(), controls.model(), controls.train()
    assert built > 0
    assert (refused > 0) == (cls is not GPControls)


def test_url_round_trip_of_every_control_class():
    for controls in (EnergyControls.from_values(layer="block", T=7, eta=0.35, rope=True),
                     DesignControls.from_values(p_scale=2.5, T=3),
                     GPControls.from_values(kernel="matern52", context=3)):
        assert type(controls).from_query(controls.to_query()) == controls


def test_controls_survive_page_switches_in_one_session():
    """One session: a control moved on every page keeps its value when the page is visited again, in another
    order, and no page raises (Streamlit drops the widget state of a page it does not draw)."""
    moved = {"energy": ("en_T", 8), "design": ("ds_d_model", 1536), "gp": ("gp_context", 3),
             "lm": ("lm_variants", ["cem-attn"])}
    at = run_page("energy")
    for page, (key, value) in moved.items():
        at.switch_page(APP_PAGES[page]).run()
        _widget(at, key).set_value(value).run()
        assert_clean(at)
    for page in ("lm", "gp", "design", "energy", "design", "lm", "energy", "gp"):
        at.switch_page(APP_PAGES[page]).run()
        assert_clean(at)
        key, value = moved[page]
        assert _widget(at, key).value == value, (page, key)


def _keys(at) -> set:
    kinds = ("slider", "select_slider", "number_input", "selectbox", "toggle")
    return {w.key for kind in kinds for w in getattr(at, kind)}


def test_controls_are_shown_only_where_they_apply():
    keys = _keys(run_page("energy", {"layer": "mlp"}))
    assert not keys & {"en_heads", "en_rope", "en_diagonal", "en_heat_head", "en_rank", "en_p_scale"}
    attention = run_page("energy", {"preconditioner": "dlr", "T": "8"})
    keys = _keys(attention)
    assert {"en_heads", "en_rope", "en_diagonal", "en_heat_head", "en_rank", "en_p_scale", "en_token"} <= keys
    assert _widget(attention, "en_token").value == 7                     # the views follow the last token
    _widget(attention, "en_seq_len").set_value(12).run()
    assert _widget(attention, "en_token").value == 11                    # and it stays the last
    _widget(attention, "en_token").set_value(3).run()
    _widget(attention, "en_seq_len").set_value(16).run()
    assert _widget(attention, "en_token").value == 3                     # a token the reader chose stays


def test_a_lesson_link_sets_its_complete_state_and_a_bad_one_is_refused():
    from cem_core.ui import lesson

    index = next(i for i, s in enumerate(lesson.STEPS) if s.pinned is not None)
    step = lesson.STEPS[index]
    at = run_page("energy", {"lesson": str(index + 1), "seed": "7"})        # the link's other settings yield
    assert_clean(at)
    assert at.session_state["lesson"] == index
    assert EnergyControls.from_values(**at.session_state["_controls_energy"]) == step.controls()
    assert at.session_state["_pinned_energy"] == step.pinned_controls().values()
    assert _widget(at, "en_T").value == step.controls().cem.T
    bad = run_page("energy", {"lesson": "99"})
    assert not bad.exception and any("does not exist" in e.value for e in bad.error)
    assert "lesson" not in bad.session_state or bad.session_state["lesson"] is None


def test_presentation_mode_draws_only_the_steps_controls():
    from cem_core.ui import lesson

    index = next(i for i, s in enumerate(lesson.STEPS) if s.page == "energy" and len(s.used()) == 2)
    at = run_page("energy", {"lesson": str(index + 1), "present": "true"})
    assert_clean(at)
    assert {w.key for w in at.slider} == {f"en_{name}" for name in lesson.STEPS[index].used()}
    assert not at.sidebar.slider and not at.sidebar.radio


def test_the_study_figures_are_drawn_once_not_on_every_rerun(monkeypatch):
    """The GP page's three matplotlib study figures took 5 of its 6 s a rerun: drawn once per process, a slider
    move redraws none of them, and the page still shows all three."""
    import streamlit as st

    from cem_core.ui import study_plots

    calls = []
    for name, builder in list(study_plots.GP_STUDY_FIGURES.items()):
        monkeypatch.setitem(study_plots.GP_STUDY_FIGURES, name,
                            lambda records, _b=builder, _n=name, **kw: calls.append(_n) or _b(records, **kw))
    st.cache_data.clear()
    at = run_page("gp")
    assert sorted(calls) == sorted(study_plots.GP_STUDY_FIGURES)
    at.slider(key="gp_context").set_value(3).run()
    assert_clean(at)
    run_page("gp")                                                           # another session, the same figures
    assert sorted(calls) == sorted(study_plots.GP_STUDY_FIGURES)
    assert [n.type for n in at.main.children.values()].count("image") == 3


def test_the_lm_estimate_is_called_a_first_guess_timed_as_the_run_runs():
    """The estimate said 3 min and the run's progress 6 to 11. The page calls it a first guess, timed on
    the threads the run uses, and says that the progress bar goes by the measured speed."""
    from cem_core.ui import jobs

    at = run_page("lm")
    assert_clean(at)
    guess = next(c.value for c in at.caption if c.value.startswith("First guess"))
    assert f"({jobs.JOB_THREADS} torch thread" in guess and "as the run uses" in guess
    assert "llama " in guess and "cem-full " in guess and "in all" in guess and "measures" in guess


def _components(at, name: str) -> list:
    """The page's Streamlit components called `name` (their protos: args as JSON, and id)."""
    return [c.proto for c in at.get("component_instance") if c.proto.component_name.endswith(name)]


def _args(component) -> dict:
    import json

    return {k: v for k, v in json.loads(component.json_args).items() if k not in ("key", "default")}


def test_instant_draws_the_explorer_with_the_kept_state_and_keeps_what_it_reports(monkeypatch):
    """Instant mode (?instant=true): the page draws the in-browser explorer with the link's state instead of its
    sidebar controls and server phases, and computes nothing; the state the explorer reports once idle becomes the
    kept controls, the link and the pinned state, which the usual page shows when Instant is turned off."""
    import json

    from streamlit.proto.WidgetStates_pb2 import WidgetState

    from cem_core.ui import cache

    shared = cache.shared

    def no_energy(name, *args):                      # every computation of the energy page goes through its cache
        assert name != "energy", "the server computed the energy page in Instant mode"
        return shared(name, *args)

    monkeypatch.setattr(cache, "shared", no_energy)
    at = run_page("energy", {"instant": "true", "T": "8"})
    assert_clean(at)
    assert at.toggle(key="instant").value is True
    (component,) = _components(at, "cem_explorer")
    assert _args(component) == {"values": EnergyControls.from_values(T=8).values(), "pinned": None, "report": 0}
    assert not _components(at, "cem_playback") and not at.sidebar.slider and not at.info and not at.warning

    # the explorer drew T 12 with anchor 1 (JSON's 1.0 is 1 in the browser) beside the pinned defaults
    drawn = EnergyControls.from_values(T=12, anchor=1.0, token=3).values() | {"anchor": 1}
    states = at._tree.get_widget_states()
    states.widgets.append(WidgetState(id=component.id, json_value=json.dumps(
        {"values": drawn, "pinned": EnergyControls().values(), "report": 1})))
    at._run(states)
    assert_clean(at)
    assert at.session_state["_controls_energy"] == EnergyControls.from_values(T=12, anchor=1.0, token=3).values()
    assert isinstance(at.session_state["_controls_energy"]["anchor"], float)
    assert (at.query_params["T"], at.query_params["anchor"], at.query_params["token"]) == ("12", "1.0", "3")
    assert at.query_params["instant"] == "true"
    assert at.session_state["_pinned_energy"] == EnergyControls().values()
    (component,) = _components(at, "cem_explorer")
    assert _args(component)["values"]["T"] == 12 and _args(component)["report"] == 1   # the report it took
    for bad in ({"values": drawn | {"T": 99}, "pinned": None, "report": 2},    # not a state the page draws: kept
                {"values": drawn | {"heads": 3}, "pinned": None, "report": 3},
                {"values": {"T": 5, "colour": "red"}, "pinned": None, "report": 4}):
        states = at._tree.get_widget_states()
        states.widgets.append(WidgetState(id=component.id, json_value=json.dumps(bad)))
        at._run(states)
        assert_clean(at)
        assert at.session_state["_controls_energy"]["T"] == 12 and at.query_params["T"] == "12"

    monkeypatch.undo()                               # Instant off: the server's page, in the same state
    at.toggle(key="instant").set_value(False).run()
    assert_clean(at)
    assert "instant" not in at.query_params
    assert (at.slider(key="en_T").value, at.slider(key="en_anchor").value, at.slider(key="en_token").value) == \
        (12, 1.0, 3)
    assert not _components(at, "cem_explorer") and _components(at, "cem_playback")
    assert [b.key for b in at.button if b.key.endswith("-energy")] == ["unpin-energy"]
    assert [c.value for c in at.caption if c.value.startswith("Pinned")] == [
        "Pinned: **token 255, T 4, anchor 0.0**, drawn faint and dashed; now: **token 3, T 12, anchor 1.0**."]
