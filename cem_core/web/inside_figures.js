// The GP side of "Inside a trained model", built in the browser from what CEMGP.inspect computes: the figures of
// cem_core/ui/inside_figures.py and the playback arguments and words of cem_core/ui/inside.py (gp_figures,
// gp_frames, gp_view, gp_reading), in figures.js's look. The Python is the reference: each function names the one
// it mirrors (tests/test_web_gp.py compares the two). A classic script, after figures.js: globalThis.CEMInside.
"use strict";

(function () {
  const {figure, layout, integerTicks, scatter, perTokenFigure, attentionHeatmapFigure, heatmapTitle, onAxis,
         typedArray, hash, PALETTE, PINNED, CURSOR, NOW, WEIGHTS} = CEMFigures.parts;
  const GP_PLOTS = ["curve", "rmse", "energy", "heatmap"];              // inside.GP_PLOTS
  const CARRIES = 2 / 3, AWAY = 1.02, HELP_TOLERANCE = 0.02;           // inside.CARRIES, AWAY; inspect.HELP_TOLERANCE
  // Python's f"{v:.3f}" (toFixed rounds the exact binary value as Python does, but for exact ties: none in an RMSE)
  const f3 = (v) => (Number.isFinite(v) ? v.toFixed(3) : Number.isNaN(v) ? "nan" : v > 0 ? "inf" : "-inf");

  // -- cem_core/ui/inside_figures.py --------------------------------------------------------------------------

  function curveTitle(data, t) {                         // mirrors inside_figures.inside_curve_title
    if (!data.layers.length) return `Prediction, ${data.context} points seen (no in-layer steps)`;
    return `Prediction after step ${t} of ${data.layers[0].T}, ${data.context} points seen`;
  }

  function legend(fig, where) {                          // mirrors inside_figures.inside_legend
    if (where === "right") {
      fig.layout.legend = {...fig.layout.legend, x: 1.02, y: 1, yanchor: "top", orientation: "v"};
      fig.layout.margin.r = 10;
    } else {
      fig.layout.legend = {...fig.layout.legend, x: 0, y: -0.2, yanchor: "top", orientation: "h"};
      fig.layout.margin.b = 110;
    }
    return fig;
  }

  function curveFigure(data, step, height, where) {
    // mirrors inside_figures.inside_curve_figure (no pinned state): the prediction after step `step` of the first CEM
    // layer against the posterior mean ± 2 sd, the truth (a drawn function's) and the K context points
    const {grid, posterior_mean: mean, posterior_sd: sd} = data, layer = data.layers.length ? data.layers[0] : null;
    const upper = mean.map((m, k) => m + 2 * sd[k]), lower = mean.map((m, k) => m - 2 * sd[k]);
    const fig = figure();
    fig.data.push(scatter({x: grid, y: upper, mode: "lines", line: {width: 0}, showlegend: false, name: "upper",
                           hoverinfo: "skip"}));
    fig.data.push(scatter({x: grid, y: lower, mode: "lines", line: {width: 0}, fill: "tonexty",
                           fillcolor: "rgba(31,119,180,0.18)", name: "GP ± 2 sd", hoverinfo: "skip"}));
    if (data.truth !== null) {
      fig.data.push(scatter({x: grid, y: data.truth, mode: "lines", name: "true f", line: {color: "black", dash: "dot"}}));
    }
    fig.data.push(scatter({x: grid, y: mean, mode: "lines", name: "GP mean", line: {color: PALETTE[0], width: 2.5}}));
    fig.data.push(scatter({x: grid, y: layer ? layer.prediction[step] : data.prediction, mode: "lines", meta: NOW,
                           name: "model", line: {color: PALETTE[3], width: 3}}));
    fig.data.push(scatter({x: data.context_x, y: data.context_y, mode: "markers", name: `context (${data.context})`,
                           marker: {color: "black", size: 9}}));
    const seen = data.truth === null ? data.context_y : data.truth;
    const top = Math.max(...[...upper, ...lower, ...seen].map(Math.abs));
    layout(fig, curveTitle(data, step), "x", "y", height, {range: [grid[0], grid[grid.length - 1]]},
           {range: [-1.2 * top, 1.2 * top]});
    return legend(fig, where);
  }

  function rmseFigure(data, step, height, where) {
    // mirrors inside_figures.inside_rmse_figure (no pinned state): the RMSE after each step to the posterior mean
    // and to the truth, the trained T marked, a cursor and markers at step `step`
    const layer = data.layers.length ? data.layers[0] : null;
    const steps = layer ? Array.from({length: layer.T + 1}, (_, t) => t) : [0, 1];
    const posterior = layer ? layer.rmse_to_posterior : [data.rmse_to_posterior, data.rmse_to_posterior];
    const truth = data.truth === null ? null : layer ? layer.rmse_to_truth : [data.rmse_to_truth, data.rmse_to_truth];
    const fig = figure();
    fig.data.push(scatter({x: steps, y: posterior, mode: "lines+markers", name: "to GP mean",
                           line: {color: PALETTE[0], width: 3}}));
    if (truth !== null) {
      fig.data.push(scatter({x: steps, y: truth, mode: "lines+markers", name: "to true f",
                             line: {color: "black", width: 1.5}, marker: {size: 5}}));
    }
    const values = [...posterior, ...(truth || [])], finite = values.filter(Number.isFinite);
    const [lo, hi] = finite.length ? [Math.min(...finite), Math.max(...finite)] : [0, 1];
    if (layer) {
      fig.data.push(scatter({x: [data.trained_T, data.trained_T], y: [lo, hi], mode: "lines",
                             name: `trained T=${data.trained_T}`, hoverinfo: "skip",
                             line: {color: "#888", dash: "dash", width: 1.5}}));
    }
    fig.data.push(scatter({x: [step, step], y: [lo, hi], mode: "lines", meta: CURSOR, showlegend: false,
                           hoverinfo: "skip", line: {color: "#555", dash: "dot", width: 1.5}}));
    fig.data.push(scatter({x: truth === null ? [step] : [step, step],
                           y: truth === null ? [posterior[step]] : [posterior[step], truth[step]], mode: "markers",
                           meta: NOW, showlegend: false, hoverinfo: "skip",
                           marker: {size: 15, color: "rgba(0,0,0,0)", line: {color: "black", width: 3}}}));
    const last = steps[steps.length - 1];
    layout(fig, "RMSE of the prediction after step t", "step t", "RMSE", height,
           integerTicks({range: [steps[0] - 0.4, last + 0.4]}, last));
    return legend(fig, where);
  }

  // -- cem_core/ui/inside.py ------------------------------------------------------------------------------------

  function packed(rows) {                                // nested lists as figures.js's {shape, data}
    const shape = [];
    for (let leaf = rows; Array.isArray(leaf); leaf = leaf[0]) shape.push(leaf.length);
    return {shape, data: Float64Array.from(rows.flat(Infinity))};
  }

  function gpFigures(data, height, where) {              // mirrors inside.gp_figures (no pinned state)
    const layer = data.layers.length ? data.layers[0] : null, query = data.context_x.length;
    const figures = {curve: curveFigure(data, layer ? layer.T : 0, height, where),
                     rmse: rmseFigure(data, layer ? layer.T : 0, height, where)};
    if (layer) {
      figures.energy = perTokenFigure(packed(layer.energies), `token energies (${query}: the query)`, "energy",
                                      {height, token: query, legend: "followed"});
      figures.heatmap = attentionHeatmapFigure(packed(layer.attention), layer.T, 0, height, query);
    }
    return figures;
  }

  function finite(values) {                              // mirrors inside.finite: NaN and ±inf as null, a gap
    return values.map((v) => (Number.isFinite(v) ? v : null));
  }

  function extent(...values) {                           // mirrors inside.extent
    const every = values.flatMap((v) => (v.shape ? Array.from(v.data) : v.flat(Infinity))).filter(Number.isFinite);
    return every.length ? [Math.min(...every), Math.max(...every)] : [0.0, 1.0];
  }

  function gpFrames(data) {                              // mirrors inside.gp_frames: the updates that show step t
    const layer = data.layers[0], query = data.context_x.length, {values: energies} = onAxis(packed(layer.energies));
    const posterior = layer.rmse_to_posterior, truth = layer.rmse_to_truth || [];
    const rmseY = extent(posterior, truth), energyY = extent(energies), n = energies.shape[1];
    const out = [];
    for (let t = 0; t <= layer.T; t++) {
      const frame = [{figure: "curve", meta: NOW, y: finite(layer.prediction[t]), title: curveTitle(data, t)},
                     {figure: "rmse", meta: CURSOR, x: [t, t], y: rmseY},
                     {figure: "rmse", meta: NOW, x: truth.length ? [t, t] : [t],
                      y: finite([posterior[t], ...truth.slice(t, t + 1)])},
                     {figure: "energy", meta: CURSOR, x: [t, t], y: energyY},
                     {figure: "energy", meta: NOW, x: [t], y: finite([energies.data[t * n + query]])}];
      frame.push({figure: "heatmap", meta: WEIGHTS, z: {array: "weights", index: Math.max(t, 1) - 1},
                  title: heatmapTitle(t, layer.T, 0)});
      out.push(frame);
    }
    return out;
  }

  function gpView(data, figures, shown, fontScale, hint) {
    // mirrors inside.gp_view: the playback component's arguments (a version of this side's own hash)
    const layer = data.layers.length ? data.layers[0] : null, names = shown.filter((name) => name in figures);
    const steps = layer ? layer.T : 0;
    let arrays = {}, words = new Uint32Array(0);
    if (layer) {
      const [T, , n] = [layer.attention.length, layer.attention[0].length, layer.attention[0][0].length];
      const weights = Float32Array.from(layer.attention.map((step) => step[0]).flat(Infinity));
      arrays = {weights: typedArray(weights, [T, n, n])};
      words = new Uint32Array(weights.buffer);
    }
    const frames = (layer ? gpFrames(data) : [[]]).map((frame) => frame.filter((u) => names.includes(u.figure)));
    const cursor = figures.rmse.data.find((tr) => tr.meta === CURSOR).y;
    for (const frame of frames) for (const u of frame) if (u.figure === "rmse" && u.meta === CURSOR) u.y = cursor;
    const shownFigures = names.map((name) => ({name, figure: figures[name]}));
    return {figures: shownFigures, frames, arrays, steps, start: steps, pick: {}, hint, font_scale: fontScale,
            version: hash(JSON.stringify([shownFigures, frames]), words)};
  }

  function lostAt(rmse) {                                // mirrors inside.lost_at
    const t = rmse.findIndex((r) => !Number.isFinite(r));
    return t < 0 ? null : t;
  }

  function carried(layer) {                              // mirrors inside.carried
    const r = layer.rmse_to_posterior, first = r[0], last = r[r.length - 1];
    return last <= CARRIES * first ? "towards" : last > AWAY * first ? "away" : "barely";
  }

  function extraSteps(trained, test) {                   // mirrors gp.inspect.extra_steps
    if (!Number.isFinite(test)) return "hurt";
    const change = test / Math.max(trained, 1e-12) - 1;
    return change < -HELP_TOLERANCE ? "help" : change > HELP_TOLERANCE ? "hurt" : "stall";
  }

  function gpReading(data, trainedRmse) {
    // mirrors inside.gp_reading: what the steps do to the prediction here, and whether steps beyond the trained T
    // help, stall or hurt
    const layer = data.layers.length ? data.layers[0] : null;
    if (!layer) {
      const truth = data.rmse_to_truth === null ? "" : ` and ${f3(data.rmse_to_truth)} to the truth`;
      return "Llama attention takes no in-layer steps: its prediction is one forward pass, RMSE " +
             `${f3(data.rmse_to_posterior)} to the posterior mean${truth}.`;
    }
    const r = layer.rmse_to_posterior, T = layer.T, trained = data.trained_T, lost = lostAt(r);
    const where = data.truth !== null ? "this function" : "these points";
    if (lost !== null) {
      const at = Math.min(trained, lost - 1);
      return `The iterates diverge on ${where}: the prediction is lost (not a number) from step ${lost} on, ` +
             `${lost > trained ? "beyond" : "within"} the trained T = ${trained}; its RMSE to the posterior mean was ` +
             `${f3(r[0])} at step 0 and ${f3(r[at])} at step ${at}.`;
    }
    const words = {towards: "carry the prediction towards the posterior mean",
                   away: "carry the prediction away from the posterior mean",
                   barely: "barely move the prediction"}[carried(layer)];
    const text = `On ${where} the steps ${words}: its RMSE to the posterior mean is ${f3(r[0])} at step 0 and ` +
                 `${f3(r[r.length - 1])} after step ${T}.`;
    if (T === trained) return text + ` (T = ${T} is the trained T; turn the test-time T to see whether more steps help.)`;
    const base = T > trained ? r[trained] : trainedRmse, verdict = extraSteps(base, r[r.length - 1]);
    if (T > trained) {
      return text + ` Steps beyond the trained T = ${trained} **${verdict}** here: ${f3(r[r.length - 1])} at T = ${T} ` +
             `against ${f3(base)} at T = ${trained}.`;
    }
    const early = {help: "helps", stall: "changes little", hurt: "hurts"}[verdict];
    return text + ` Fewer steps than trained: ${f3(r[r.length - 1])} at T = ${T} against ${f3(base)} at the trained ` +
           `T = ${trained} (stopping early ${early}).`;
  }

  globalThis.CEMInside = {GP_PLOTS, curveFigure, rmseFigure, gpFigures, gpFrames, gpView, gpReading, curveTitle};
})();
