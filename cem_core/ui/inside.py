"""The page "Inside a trained model", as data: what ``gp.inspect`` and ``lm.inspect`` read inside a trained model,
made ready for the app (the figures themselves: ``inside_figures``).

GP: ``gp_view`` gives the step playback's arguments (app_pages/playback/) for one function: the prediction after
step t against the posterior, the RMSE after each step, each token's energy E(x⁽ᵗ⁾ | c) per step and the attention
weights of step t, with every step's updates sent once, so that moving through the steps needs no server.
``gp_reading`` says in words what the steps and the test-time T do on this function, ``scaling_words`` what
test-time T does over the held-out functions (``models.test_time``: measured once, after training).

LM: the tokens coloured by the loss of their next token (``loss_html``), the logit lens's table (``lens_rows``)
and short sentences of the validation text (``sample_sentences``). Nothing here draws or imports Streamlit.
"""
from __future__ import annotations

import hashlib
import html
import json
import re

import numpy as np

from cem_core.experiments.gp.inspect import extra_steps, scaling_reading

from . import descent_figures, inside_figures
from .figure_style import CURSOR, NOW, WEIGHTS
from .playback import typed_array
from .symlog import SymLog

GP_PLOTS = ("curve", "rmse", "energy", "heatmap")     # the GP side's playback plots, in the page's order
CARRIES = 2 / 3                 # the steps "carry the prediction towards the posterior": RMSE at T <= 2/3 step 0's
AWAY = 1.02                     # "carry it away": the RMSE at T above 1.02 x step 0's
LOSS_SCALE = 6.0                # nats at which a token's colour is fully red (ln 256 = 5.5: a uniform guess)
SENTENCE_END = re.compile(r"(?<=[a-z][.!?])\s+")
PLAIN_SENTENCE = re.compile(r"[A-Z][A-Za-z ,;'()-]+[a-z][.!?]")


def gp_figures(data: dict, pinned: dict | None = None, names: tuple[str, str] | None = None,
               height: int | None = None, legend: str = "below") -> dict:
    """The GP side's figures by name (GP_PLOTS; a model without CEM layers has only the curve and the RMSE), their
    legends `legend` ("below" or "right", ``inside_figures.inside_legend``)."""
    layer = data["layers"][0] if data["layers"] else None
    query = len(data["context_x"])                                    # the query token: after the K context tokens
    figures = {name: build(data, pinned=pinned, names=names, height=height, legend=legend) for name, build in
               (("curve", inside_figures.inside_curve_figure), ("rmse", inside_figures.inside_rmse_figure))}
    if layer is not None:
        figures["energy"] = descent_figures.per_token_figure(
            np.asarray(layer["energies"]), f"token energies ({query}: the query)", "energy",
            height=height, token=query, legend="followed")
        if layer["attention"] is not None:
            figures["heatmap"] = descent_figures.attention_heatmap_figure(np.asarray(layer["attention"]), layer["T"], 0,
                                                                      height=height, token=query)
    return figures


def finite(values) -> list:
    """Numbers as JSON can carry them to the browser: NaN and ±inf (a diverging descent) become None, a gap."""
    return [float(v) if np.isfinite(v) else None for v in np.asarray(values, dtype=float).ravel()]


def extent(*values) -> list[float]:
    """The finite range of values (a cursor's vertical extent), [0, 1] when none is finite."""
    every = np.concatenate([np.asarray(v, dtype=float).ravel() for v in values])
    every = every[np.isfinite(every)]
    return [float(every.min()), float(every.max())] if len(every) else [0.0, 1.0]


def gp_frames(data: dict) -> list[list[dict]]:
    """For t = 0..T, the updates that show step t: the curve to the prediction after step t (and its title), the
    cursor and markers on the RMSE and energy plots to t, the heatmap to the weights of step t."""
    layer = data["layers"][0]
    query = len(data["context_x"])
    energies, _, _ = SymLog.on_axis(np.asarray(layer["energies"]))
    posterior, truth = layer["rmse_to_posterior"], layer["rmse_to_truth"] or []   # a learner's points: no truth
    rmse_y = extent(posterior, truth)
    out = []
    for t in range(layer["T"] + 1):
        frame = [{"figure": "curve", "meta": NOW, "y": finite(layer["prediction"][t]),     # x: the grid, kept
                  "title": inside_figures.inside_curve_title(data, t)},
                 {"figure": "rmse", "meta": CURSOR, "x": [t, t], "y": rmse_y},
                 {"figure": "rmse", "meta": NOW, "x": [t] * (2 if truth else 1),
                  "y": finite([posterior[t]] + truth[t:t + 1])},
                 {"figure": "energy", "meta": CURSOR, "x": [t, t], "y": extent(energies)},
                 {"figure": "energy", "meta": NOW, "x": [t], "y": finite([energies[t, query]])}]
        if layer["attention"] is not None:
            frame.append({"figure": "heatmap", "meta": WEIGHTS, "z": {"array": "weights", "index": max(t, 1) - 1},
                          "title": descent_figures.heatmap_title(t, layer["T"], 0)})
        out.append(frame)
    return out


def gp_view(data: dict, figures: dict, shown=GP_PLOTS, font_scale: float = 1.0, hint: str = "") -> dict:
    """The playback component's arguments: the `shown` figures (names of GP_PLOTS, in that order) as Plotly JSON,
    the frames of every step, the attention weights of head 0, and a version that changes with any of them."""
    layer = data["layers"][0] if data["layers"] else None
    names = [name for name in shown if name in figures]
    texts = [figures[name].to_json() for name in names]
    steps = layer["T"] if layer else 0
    arrays = {} if layer is None or layer["attention"] is None else {
        "weights": typed_array(np.asarray(layer["attention"])[:, 0])}
    frames = [[u for u in frame if u["figure"] in names] for frame in (gp_frames(data) if layer else [[]])]
    cursor = next(list(tr.y) for tr in figures["rmse"].data if tr.meta == CURSOR)   # its extent, pinned state too
    for update in (u for frame in frames for u in frame if u["figure"] == "rmse" and u["meta"] == CURSOR):
        update["y"] = cursor
    payload = {"figures": [{"name": n, "figure": json.loads(text)} for n, text in zip(names, texts)],
               "frames": frames, "arrays": arrays, "steps": steps, "start": steps, "pick": {}, "hint": hint,
               "font_scale": font_scale}
    digest = hashlib.sha1("".join(texts).encode())
    digest.update(json.dumps(frames).encode())
    return payload | {"version": digest.hexdigest()}


def lost_at(rmse: list) -> int | None:
    """The first step whose prediction is not a number (the iterates diverged), or None."""
    return next((t for t, r in enumerate(rmse) if not np.isfinite(r)), None)


def carried(layer: dict) -> str:
    """What the steps do to the prediction on this function: "towards" the posterior mean (its RMSE after the last
    step at most CARRIES x step 0's), "away" from it (above AWAY x), or "barely" move it."""
    first, last = layer["rmse_to_posterior"][0], layer["rmse_to_posterior"][-1]
    return "towards" if last <= CARRIES * first else "away" if last > AWAY * first else "barely"


def gp_reading(data: dict, trained_rmse: float | None = None) -> str:
    """In words, read off the data: what the steps do to the prediction on this function, and whether the steps
    beyond the trained T help, stall or hurt here (``extra_steps``); `trained_rmse`: the RMSE to the posterior
    mean at the trained T (needed when the test-time T is below it)."""
    layer = data["layers"][0] if data["layers"] else None
    if layer is None:
        truth = "" if data["rmse_to_truth"] is None else f" and {data['rmse_to_truth']:.3f} to the truth"
        return (f"Llama attention takes no in-layer steps: its prediction is one forward pass, RMSE "
                f"{data['rmse_to_posterior']:.3f} to the posterior mean{truth}.")
    r, T, trained = layer["rmse_to_posterior"], layer["T"], data["trained_T"]
    lost = lost_at(r)
    if lost is not None:
        return (f"The iterates diverge on {'this function' if data['truth'] is not None else 'these points'}: "
                f"the prediction is lost (not a number) from step {lost} on, "
                f"{'beyond' if lost > trained else 'within'} the trained T = {trained}; its RMSE to the posterior "
                f"mean was {r[0]:.3f} at step 0 and {r[min(trained, lost - 1)]:.3f} at step {min(trained, lost - 1)}.")
    how = carried(layer)
    words = {"towards": "carry the prediction towards the posterior mean",
             "away": "carry the prediction away from the posterior mean", "barely": "barely move the prediction"}[how]
    where = "this function" if data["truth"] is not None else "these points"
    text = f"On {where} the steps {words}: its RMSE to the posterior mean is {r[0]:.3f} at step 0 and " \
           f"{r[-1]:.3f} after step {T}."
    if T == trained:
        return text + f" (T = {T} is the trained T; turn the test-time T to see whether more steps help.)"
    base = r[trained] if T > trained else trained_rmse
    verdict = extra_steps(base, r[-1])
    if T > trained:
        return text + (f" Steps beyond the trained T = {trained} **{verdict}** here: {r[-1]:.3f} at T = {T} "
                       f"against {base:.3f} at T = {trained}.")
    early = {"help": "helps", "stall": "changes little", "hurt": "hurts"}[verdict]
    return text + (f" Fewer steps than trained: {r[-1]:.3f} at T = {T} against {base:.3f} at the trained "
                   f"T = {trained} (stopping early {early}).")


def scaling_words(measured: dict, T: int) -> str:
    """The held-out functions' reading of test-time T (``gp.inspect.scaling_reading``), with the mean ratio."""
    if T not in measured["T"]:
        return f"The held-out functions were measured at T = {measured['T'][0]} … {measured['T'][-1]} only."
    by_T = measured["by_T"][measured["T"].index(T)]
    if not np.isfinite(by_T["mean"]):
        return (f"At T = {T} the prediction is lost (not a number) on some of the {measured['functions']} held-out "
                "functions: the iterates diverge.")
    return (f"Mean RMSE / GP optimum at T = {T}: {by_T['mean']:.3f} ± {by_T['se']:.3f} (se). "
            + scaling_reading(measured, T))


# -- the language model ---------------------------------------------------------------------------------


def loss_colour(loss: float) -> str:
    """White (loss 0) to red (LOSS_SCALE nats and more)."""
    share = min(max(loss / LOSS_SCALE, 0.0), 1.0)
    return f"rgba(214,39,40,{0.05 + 0.8 * share:.2f})"


def loss_html(tokens: list[str], targets: list[str], losses: list[float]) -> str:
    """The text as tokens, each coloured by the loss of the next token predicted there (hover: the numbers)."""
    spans = [f'<span class="tok" style="background:{loss_colour(loss)}" title="next {html.escape(n)}: loss '
             f'{loss:.2f} nats">{html.escape(t)}</span>' for t, n, loss in zip(tokens, targets, losses)]
    return ('<div class="lens-tokens" style="font-family: monospace; font-size: 1.15rem; line-height: 2; '
            'word-break: break-all;">' + "".join(spans) + "</div>")


def _top5(entries: list) -> str:
    return " · ".join(f"{label} {p:.2f}" for label, p in entries)


def lens_rows(data: dict, layer: int | None, step: int, llama: dict | None = None) -> list[dict]:
    """The logit lens as a table, one row per position: the token read, the true next one, its loss and the top 5
    next tokens with the CEM layer `layer` stopped after step `step` (None: the model's own forward pass), and
    Llama's top 5 beside them."""
    lens = data["final"] if layer is None else data["layers"][layer]
    top = lens["top"] if layer is None else lens["top"][step]
    loss = lens["loss"] if layer is None else lens["loss"][step]
    rows = []
    for i, (token, target) in enumerate(zip(data["tokens"], data["targets"])):
        row = {"position": i, "token": token, "next": target, "loss": round(loss[i], 3), "top 5": _top5(top[i])}
        if llama is not None:
            row |= {"Llama loss": round(llama["final"]["loss"][i], 3), "Llama top 5": _top5(llama["final"]["top"][i])}
        rows.append(row)
    return rows


def sample_sentences(documents, count: int = 8, max_bytes: int = 120) -> list[str]:
    """The first `count` distinct plain sentences (a capital first, letters and light punctuation, 30 to `max_bytes`
    bytes) of `documents`, in their order: deterministic for the same text."""
    out = []
    for doc in documents:
        for paragraph in doc.split("\n\n"):
            for sentence in SENTENCE_END.split(" ".join(paragraph.split())):
                if 30 <= len(sentence.encode()) <= max_bytes and PLAIN_SENTENCE.fullmatch(sentence) \
                        and sentence not in out:
                    out.append(sentence)
                    if len(out) == count:
                        return out
    return out
