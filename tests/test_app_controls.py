"""Controls that cannot reach an invalid state: random sequences of control changes, made the way a
person makes them (one widget at a time, each followed by the page's rerun), never end in an error box or a
traceback. The energy and design pages' controls depend on each other (heads divide the width, RoPE needs even
head widths, the diagonal's form needs a diagonal); the only refusal left is a state too large for an
interactive page, shown as a warning in the page's labels while the last state that fits stays drawn."""
import random

import pytest
from conftest import run_page, shown

from cem_core.ui.controls import EnergyControls
from cem_core.ui.design_controls import DesignControls

pytestmark = pytest.mark.slow          # whole app pages (AppTest), a few hundred reruns

# Values a person reaches: every option, the ends of every range, and the sizes where heads and RoPE collide
ENERGY_NUMBERS = {"width": (2, 3, 5, 6, 7, 8, 9, 12, 15, 16, 24, 30, 512), "seq_len": (2, 3, 5, 8, 16, 256),
                  "seed": (0, 1, 2, 9999)}
DESIGN_NUMBERS = {"d_model": (8, 100, 768, 777, 1536, 8192), "n_layers": (1, 12, 128), "d_ff": (8, 2048, 32768),
                  "vocab_size": (2, 32000), "seq_len": (1, 1024, 131072), "seed": (0, 5)}


def _widgets(at):
    return {w.key: w for kind in ("slider", "select_slider", "number_input", "selectbox", "radio", "toggle")
            for w in getattr(at, kind) if w.key}


def _random_value(rng, widget, numbers: dict, name: str, cls):
    kind, allowed = cls.specs().get(name, (None, None))
    if kind == "choice":
        return rng.choice(tuple(allowed))               # the values (a registry's names), whatever labels it shows
    if hasattr(widget, "options") and widget.options:
        options = list(widget.options)
        value = rng.choice(options)
        return int(value) if value.isdigit() else value
    if type(widget).__name__ == "Toggle":
        return not widget.value
    if name in numbers:
        return rng.choice(numbers[name])
    lo, hi = widget.min, widget.max
    step = getattr(widget, "step", 1) or 1
    if isinstance(lo, float) or isinstance(step, float):
        return round(lo + rng.randrange(int(round((hi - lo) / step)) + 1) * step, 10)
    return rng.choice((lo, hi, rng.randint(lo, hi)))


def _walk(page: str, prefix: str, numbers: dict, cls, changes: int, seed: int) -> dict:
    rng, at, seen = random.Random(seed), run_page(page), {"refused": 0, "settled": 0}
    for i in range(changes):
        widgets = {k: w for k, w in _widgets(at).items() if k.startswith(prefix) and not getattr(w, "disabled", False)}
        key = rng.choice(sorted(widgets))
        name = key[len(prefix):]
        value = _random_value(rng, widgets[key], numbers, name, cls)
        widgets[key].set_value(value).run()
        where = f"change {i + 1}: {name} = {value!r}"
        assert not at.exception, (where, at.exception)
        assert not at.error, (where, [e.value for e in at.error])
        refused = [w.value for w in at.warning if "too large for an interactive page" in w.value]
        seen["refused"] += bool(refused)
        seen["settled"] += len(at.toast)
        # The URL always holds a state the page accepts, and (unless refused: then it holds the last state that
        # fits, as the warning says) the one the controls show.
        cls.from_query(dict(at.query_params))
        if not refused:
            for k, w in _widgets(at).items():
                field = k[len(prefix):]
                if k.startswith(prefix) and field in cls.specs() and field not in ("token", "heat_head"):
                    text = str(w.value).lower() if isinstance(w.value, bool) else str(w.value)
                    assert at.query_params[cls.PREFIX + field] == text, (where, field, w.value)
    return seen


@pytest.mark.parametrize("seed", [1, 2])
def test_random_control_sequences_on_the_energy_page_never_show_an_error(seed):
    seen = _walk("energy", "en_", ENERGY_NUMBERS, EnergyControls, 120, seed)
    assert seen["settled"] > 0           # the walk did meet dependent controls (a heads snap, RoPE off)


def test_random_control_sequences_on_the_design_page_never_show_an_error():
    seen = _walk("design", "ds_", DESIGN_NUMBERS, DesignControls, 60, 3)
    assert seen["settled"] > 0


def test_pressing_right_on_heads_at_width_8_goes_to_the_next_divisor():
    """The issue's first break: heads 3 at width 8 replaced the page with "d_model=8 is invalid"."""
    at = run_page("energy")
    heads = at.select_slider(key="en_heads")
    assert list(heads.options) == ["1", "2", "4", "8"]
    heads.set_value(4).run()
    assert not at.error and at.query_params["heads"] == "4"


def test_a_diagonal_turned_off_resets_its_form():
    """diagonal shared -> form distance -> diagonal none: the form goes back to bilinear, hidden, no error."""
    at = run_page("energy")
    at.selectbox(key="en_diagonal").set_value("shared").run()
    at.selectbox(key="en_diagonal_form").set_value("distance").run()
    at.selectbox(key="en_diagonal").set_value("none").run()
    assert not at.error and not at.exception
    assert at.query_params["diagonal_form"] == "bilinear"
    assert "en_diagonal_form" not in _widgets(at)
    at.selectbox(key="en_diagonal").set_value("per_head").run()
    assert at.selectbox(key="en_diagonal_form").value == "bilinear"


def test_a_width_the_heads_do_not_divide_moves_the_heads_with_a_toast():
    at = run_page("energy")
    at.number_input(key="en_width").set_value(7).run()                   # 2 heads do not divide 7
    assert not at.error
    assert at.select_slider(key="en_heads").value == 1 and at.query_params["heads"] == "1"
    assert any("heads 2 → 1" in shown(t.value) for t in at.toast), [t.value for t in at.toast]


def test_an_odd_width_turns_rope_off_and_disables_it():
    at = run_page("energy", {"rope": "true"})
    at.number_input(key="en_width").set_value(9).run()
    assert not at.error and at.query_params["rope"] == "false"
    assert at.toggle(key="en_rope").disabled
    assert any("RoPE is off" in shown(t.value) for t in at.toast)


def test_too_large_is_a_warning_in_the_page_labels_and_the_plots_stay():
    at = run_page("energy")
    for key, value in (("en_width", 512), ("en_seq_len", 256), ("en_T", 16)):
        (at.slider(key=key) if key == "en_T" else at.number_input(key=key)).set_value(value).run()
    assert not at.error and not at.exception
    warning, = [shown(w.value) for w in at.warning if "too large" in w.value]
    assert warning.startswith("width d 512: with sequence length 256, steps T 16") and "d_model" not in warning
    assert "last state that could be drawn" in warning
    assert at.query_params["width"] == "512" and at.query_params["seq_len"] == "8"   # the URL: the state drawn


def test_a_link_value_between_a_sliders_steps_is_snapped_and_said():
    at = run_page("energy", {"anchor": "3.65", "eta": "0.33"})
    assert not at.error
    assert at.slider(key="en_anchor").value == pytest.approx(3.6) and at.query_params["anchor"] == "3.6"
    assert at.slider(key="en_eta").value == pytest.approx(0.35) and at.query_params["eta"] == "0.35"
    said = " ".join(shown(i.value) for i in at.info)
    assert "3.65 lies between the slider's steps of 0.1: showing 3.6" in said, said


def test_design_heads_are_the_divisors_of_d_model():
    at = run_page("design")
    at.number_input(key="ds_d_model").set_value(100).run()
    assert not at.error
    heads = at.selectbox(key="ds_n_heads")
    assert [int(h) for h in heads.options] == [h for h in range(1, 101) if 100 % h == 0 and (100 // h) % 2 == 0]
    assert int(heads.value) == 10                                          # 12 snapped down to 10
