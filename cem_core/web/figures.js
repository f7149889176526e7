// The energy page's figures and step playback, built in the browser from the data CEMExplore.explore computes:
// per phase, the arguments app_pages/energy.py `_phase_views` gives the playback component (app_pages/playback/):
// the figures of cem_core/ui/descent_figures.py as Plotly JSON, in figure_style.py's look, on symlog.py's axis
// where the values span orders of magnitude, with the frames of cem_core/ui/playback.py. The Python is the
// reference: each function names the one it mirrors and does its arithmetic in the same order
// (tests/test_web_figures.py compares the two). A classic script (no modules, no build; it runs from file://):
// globalThis.CEMFigures.
//
// Arrays come as CEMExplore gives them: {shape, data}, data a typed array in row-major order.
"use strict";

(function () {
  // -- cem_core/ui/figure_style.py ------------------------------------------------------------------------------

  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf"];
  const FONT_PX = 14, TITLE_PX = 17;
  const PINNED = {color: "rgba(40,40,40,0.45)", dash: "dash", width: 2};      // the pinned state's faint overlay
  const CURSOR = "cursor", NOW = "now", WEIGHTS = "weights";      // the `meta` of the traces playback moves
  // Plotly's "Viridis" as plotly.py writes a named colour scale into a figure
  const viridis = () => [[0.0, "#440154"], [0.1111111111111111, "#482878"], [0.2222222222222222, "#3e4989"],
                         [0.3333333333333333, "#31688e"], [0.4444444444444444, "#26828e"],
                         [0.5555555555555556, "#1f9e89"], [0.6666666666666666, "#35b779"],
                         [0.7777777777777778, "#6ece58"], [0.8888888888888888, "#b5de2b"], [1.0, "#fde725"]];

  // mirrors figure_style.figure: a figure on the white template (`template`, at the end) with PALETTE's colours
  function figure(...traces) {
    return {data: traces, layout: {colorway: PALETTE.slice(), template: template()}};
  }

  // mirrors figure_style.layout: readable fonts, plain or scientific tick labels, thousands separators, a
  // uirevision, the margins; `x`, `y`: more axis settings
  function layout(fig, title, xaxis, yaxis, height, x = {}, y = {}) {
    const ticks = {exponentformat: "power", separatethousands: true};
    Object.assign(fig.layout, {
      title: {text: title, font: {size: TITLE_PX}}, font: {size: FONT_PX},
      legend: {...fig.layout.legend, font: {size: FONT_PX}}, height, uirevision: title,
      xaxis: {title: {text: xaxis}, ...ticks, ...x}, yaxis: {title: {text: yaxis}, ...ticks, ...y},
      margin: {l: 70, r: 20, t: title.includes("<br>") ? 60 : 45, b: 50}});
    return fig;
  }

  // mirrors figure_style.integer_ticks: integer ticks 0..last on a step or index axis, about six at most
  function integerTicks(axis, last) {
    return {...axis, tickmode: "linear", tick0: 0, dtick: Math.max(1, Math.ceil(last / 6))};
  }

  // fig.add_scatter's trace, as plotly.py writes it
  function scatter(trace) {
    return {...trace, type: "scatter"};
  }

  // -- arrays ({shape, data}) -----------------------------------------------------------------------------------

  function range(start, stop) {
    return Array.from({length: stop - start}, (_, k) => start + k);
  }

  function at(a, i, j) {
    return a.data[i * a.shape[1] + j];
  }

  // numpy's a[i].tolist() of a (rows, cols) array
  function row(a, i) {
    const cols = a.shape[1];
    return Array.from({length: cols}, (_, j) => a.data[i * cols + j]);
  }

  // numpy's a[:, j].tolist()
  function column(a, j) {
    return Array.from({length: a.shape[0]}, (_, i) => a.data[i * a.shape[1] + j]);
  }

  function map(a, f) {
    return {shape: a.shape, data: Float64Array.from(a.data, f)};
  }

  const {formatG, floatRepr} = globalThis.CEMFormat;          // pyformat.js: Python's number formats

  // -- cem_core/ui/controls.py ----------------------------------------------------------------------------------

  // EnergyControls.specs(): every control in its order, with its kind (how str() writes its value)
  const CONTROLS = [["layer", "choice"], ["p_scale", "float"], ["heads", "int"], ["width", "int"],
                    ["seq_len", "int"], ["seed", "int"], ["rope", "bool"], ["token", "int"], ["heat_head", "int"],
                    ["activation", "choice"], ["T", "int"], ["eta", "float"], ["anchor", "float"],
                    ["diagonal", "choice"], ["diagonal_form", "choice"], ["preconditioner", "choice"],
                    ["rank", "int"]];

  // mirrors Controls.changes: the controls whose value differs from `other`'s, with this state's values
  // ("T 16, anchor 1.0"); a legend names a state by them. `mine`, `other`: flat control values.
  function changes(mine, other) {
    const text = (kind, v) => (kind === "float" ? floatRepr(v) : kind === "bool" ? (v ? "True" : "False") : String(v));
    return CONTROLS.filter(([name]) => other[name] !== mine[name])
      .map(([name, kind]) => `${name} ${text(kind, mine[name])}`).join(", ") || "the same state";
  }

  // -- cem_core/ui/symlog.py ------------------------------------------------------------------------------------

  const SYMLOG_SPAN = 1e2;    // values whose largest is more than this many times their first step's: symmetric log

  // numpy's median of a non-empty list
  function median(values) {
    const s = Float64Array.from(values).sort(), half = s.length >> 1;
    return s.length % 2 ? s[half] : (s[half - 1] + s[half]) / 2;
  }

  // mirrors symlog.SymLog: y -> sign(y) log10(1 + |y| / c), linear within about c of zero
  class SymLog {
    constructor(c, values) {
      this.c = c;
      this.top = 0;
      this.signs = [false, false];
      for (const v of values) {
        if (!Number.isFinite(v)) continue;
        this.top = Math.max(this.top, Math.abs(v));
        this.signs = [this.signs[0] || v < 0, this.signs[1] || v > 0];
      }
    }

    // mirrors SymLog.needed: the scale for per-step values (steps, n) and the pinned state's, or null
    static needed(values, pinned) {
      const everything = pinned ? [...values.data, ...pinned.data] : values.data;
      const first = row(values, 0).filter(Number.isFinite).map(Math.abs).filter(v => v > 0);
      const top = Array.from(everything).filter(Number.isFinite).map(Math.abs);
      if (!first.length || !top.length || Math.max(...top) <= SYMLOG_SPAN * median(first)) return null;
      return new SymLog(median(first), everything);
    }

    // mirrors SymLog.__call__
    scale(v) {
      return Math.sign(v) * Math.log10(1 + Math.abs(v) / this.c);
    }

    // mirrors SymLog.axis: ticks at 0 and at ±10^k, labelled with the values they stand for
    axis() {
      const high = Math.floor(Math.log10(this.top));
      const low = Math.min(Math.ceil(Math.log10(this.c)) + 1, high);
      const every = Math.max(1, Math.ceil((high - low + 1) / 3));
      const powers = [];
      for (let k = low; k <= high; k += every) powers.push(k);
      const vals = [0.0], text = ["0"];
      for (const [sign, shown] of [[-1, this.signs[0]], [1, this.signs[1]]]) {
        if (!shown) continue;
        for (const k of powers) {
          vals.push(this.scale(sign * 10.0 ** k));
          text.push(`${sign < 0 ? "−" : ""}10<sup>${k}</sup>`);
        }
      }
      return {tickmode: "array", tickvals: vals, ticktext: text};
    }
  }

  // mirrors SymLog.on_axis: the values (and the pinned state's) as a per-token plot draws them, and the scale
  function onAxis(values, pinned) {
    const scale = SymLog.needed(values, pinned);
    if (scale === null) return {values, pinned, scale};
    const to = v => scale.scale(v);
    return {values: map(values, to), pinned: pinned && map(pinned, to), scale};
  }

  // -- cem_core/ui/descent_figures.py ---------------------------------------------------------------------------

  const TOKEN_LINES = PALETTE.length;   // up to this many tokens, one coloured line each; beyond, one grey trace

  // mirrors descent_figures.state_legend
  function stateLegend(fig, names) {
    fig.data.push(scatter({x: [null], y: [null], mode: "lines", name: `now: ${names[0]}`,
                           line: {color: "black", width: 2}}));
  }

  // mirrors descent_figures.cursor_y: the vertical extent of a step cursor (NaN where any value is, as numpy's)
  function cursorY(values, pinned) {
    let lo = Infinity, hi = -Infinity;
    for (const a of pinned ? [values, pinned] : [values]) {
      for (const v of a.data) {
        if (Number.isNaN(v)) return [NaN, NaN];
        lo = Math.min(lo, v);
        hi = Math.max(hi, v);
      }
    }
    return [lo, hi];
  }

  // mirrors descent_figures.per_token_figure (at the last step): one line per token over the steps, the followed
  // `token` bold; past TOKEN_LINES tokens the others are one grey trace
  function perTokenFigure(raw, title, yaxis, {firstStep = 0, rose = null, height, token, pinned = null, names = null,
                                               legend = "all"}) {
    const {values, pinned: shownPinned, scale} = onAxis(raw, pinned);
    const fig = figure();
    let steps = range(firstStep, firstStep + values.shape[0]);
    const step = steps[steps.length - 1];
    tokenLines(fig, values, steps, token);
    if (scale !== null || legend === "followed") {
      for (const trace of fig.data) {
        const i = trace.customdata[0];
        if (scale !== null) {                                     // hover: the values, not their log
          trace.text = column(raw, i).map(v => formatG(v, 4));
          trace.hovertemplate = `${trace.name}, step %{x}: %{text}<extra></extra>`;
        }
        if (legend === "followed" && i !== token && trace.name !== "other tokens") trace.showlegend = false;
      }
    }
    if (rose !== null && rose.data.some(Boolean)) rises(fig, values, rose, firstStep);
    if (shownPinned) {
      steps = [...new Set([...steps, ...pinnedLines(fig, shownPinned, firstStep, names)])].sort((a, b) => a - b);
    }
    fig.data.push(scatter({x: [step, step], y: cursorY(values, shownPinned), mode: "lines", meta: CURSOR,
                           showlegend: false, hoverinfo: "skip", line: {color: "#555", dash: "dot", width: 1.5}}));
    fig.data.push(scatter({x: [step], y: [at(values, step - firstStep, token)], mode: "markers", meta: NOW,
                           showlegend: false, hoverinfo: "skip", cliponaxis: false,
                           marker: {size: 16, color: "rgba(0,0,0,0)", line: {color: "black", width: 3}}}));
    const last = steps[steps.length - 1];
    return layout(fig, title + (scale !== null ? " · symmetric log" : ""), "step t", yaxis, height,
                  integerTicks({range: [steps[0] - 0.4, last + 0.4]}, last), scale !== null ? scale.axis() : {});
  }

  // mirrors descent_figures._pinned_lines: the pinned state's lines, faint and dashed, a cross where each ends, the
  // legend naming both states; returns the pinned state's steps
  function pinnedLines(fig, pinned, firstStep, names) {
    const [count, n] = pinned.shape;
    const steps = range(firstStep, firstStep + count);
    const x = [], y = [];
    for (let i = 0; i < n; i++) {
      for (let s = 0; s < count; s++) {
        x.push(steps[s]);
        y.push(at(pinned, s, i));
      }
      x.push(null);
      y.push(null);
    }
    fig.data.push(scatter({x, y, mode: "lines", name: `pinned: ${names[1]}`, line: {...PINNED}, hoverinfo: "skip"}));
    fig.data.push(scatter({x: new Array(n).fill(steps[count - 1]), y: row(pinned, count - 1), mode: "markers",
                           name: `pinned: ${names[1]}, its last step`, showlegend: false, hoverinfo: "skip",
                           marker: {symbol: "x-thin", size: 12, line: {color: PINNED.color, width: 2.5}}}));
    stateLegend(fig, names);
    return steps;
  }

  // mirrors descent_figures._token_lines: each token's line, the followed one bold; past TOKEN_LINES tokens the
  // others as one grey trace (null separates their lines)
  function tokenLines(fig, values, steps, token) {
    const n = values.shape[1];
    if (n <= TOKEN_LINES) {
      for (let i = 0; i < n; i++) {
        const bold = i === token;
        fig.data.push(scatter({x: steps.slice(), y: column(values, i), mode: "lines+markers", name: `token ${i}`,
                               customdata: steps.map(() => i), opacity: bold ? 1.0 : 0.55,
                               line: {color: PALETTE[i % PALETTE.length], width: bold ? 4 : 1.5},
                               marker: {size: bold ? 8 : 5}}));
      }
      return;
    }
    const x = [], y = [], customdata = [];
    for (let i = 0; i < n; i++) {
      if (i === token) continue;
      for (let s = 0; s < steps.length; s++) {
        x.push(steps[s]);
        y.push(at(values, s, i));
        customdata.push(i);
      }
      x.push(null);
      y.push(null);
      customdata.push(i);
    }
    fig.data.push(scatter({x, y, customdata, mode: "lines", name: "other tokens", line: {color: "#b0b0b0", width: 1}}));
    fig.data.push(scatter({x: steps.slice(), y: column(values, token), mode: "lines+markers", name: `token ${token}`,
                           customdata: steps.map(() => token), line: {color: PALETTE[0], width: 3}}));
  }

  // mirrors descent_figures._rises: a red ring where token i's value rose at step t + 1, in np.nonzero's order
  function rises(fig, values, rose, firstStep) {
    const [count, n] = rose.shape;
    const x = [], y = [], customdata = [], text = [];
    for (let t = 0; t < count; t++) {
      for (let i = 0; i < n; i++) {
        if (!rose.data[t * n + i]) continue;
        x.push(firstStep + t + 1);
        y.push(at(values, t + 1, i));
        customdata.push(i);
        text.push(`token ${i}, step ${t + 1}: +${formatG(at(values, t + 1, i) - at(values, t, i), 3)}`);
      }
    }
    fig.data.push(scatter({x, y, mode: "markers", name: "energy rose", customdata,
                           marker: {size: 15, color: "rgba(0,0,0,0)", line: {color: "red", width: 2.5}},
                           text, hovertemplate: "%{text}<extra></extra>"}));
  }

  // mirrors descent_figures.heatmap_title: the heatmap's title at playback step `step` (0: the weights step 1 uses)
  function heatmapTitle(step, steps, head) {
    return `Attention${step === 0 ? " at x⁽⁰⁾" : `, step ${step} of ${steps}`}, head ${head}`;
  }

  // mirrors descent_figures.attention_heatmap_figure: a^k_ij of step `step` (1..T) and `head` (weights (T, H, n, n)),
  // the followed token's row framed
  function attentionHeatmapFigure(weights, step, head, height, token) {
    const [, heads, n, m] = weights.shape;
    const start = ((Math.max(step, 1) - 1) * heads + head) * n * m;
    const z = range(0, n).map(i => Array.from({length: m}, (_, j) => weights.data[start + i * m + j]));
    const fig = figure({type: "heatmap", z, x: range(0, m), y: range(0, n), meta: WEIGHTS, colorscale: viridis(),
                        zmin: 0, zmax: 1, name: `head ${head}`});
    fig.layout.shapes = [{type: "rect", x0: -0.5, x1: m - 0.5, y0: token - 0.5, y1: token + 0.5,
                          line: {color: "red", width: 3}}];
    return layout(fig, heatmapTitle(step, weights.shape[0], head), "key j", "query i", height,
                  integerTicks({}, m - 1), integerTicks({autorange: "reversed"}, n - 1));
  }

  // mirrors descent_figures.landscape_figure (at the last step): the token's energy on a plane, its trajectory, the
  // key points (attention) and the pinned state's trajectory in this plane (`pinned` (k, 2), named by `names`)
  function landscapeFigure(land, token, height, pinned, names) {
    const [grid] = land.energy.shape;
    const fig = figure({type: "contour", x: Array.from(land.a.data), y: Array.from(land.b.data),
                        z: range(0, grid).map(k => row(land.energy, k)), colorscale: viridis(), ncontours: 30,
                        name: "energy", colorbar: {title: {text: "E"}, exponentformat: "power"}});
    const traj = land.trajectory, last = traj.shape[0] - 1;
    fig.data.push(scatter({x: column(traj, 0), y: column(traj, 1), mode: "lines+markers",
                           name: pinned === null ? "x⁽ᵗ⁾" : `x⁽ᵗ⁾ now: ${names[0]}`, line: {color: "white", width: 2},
                           marker: {size: 7, color: "white", line: {color: "black", width: 1}}}));
    fig.data.push(scatter({x: [at(traj, 0, 0)], y: [at(traj, 0, 1)], mode: "markers", name: "x⁽⁰⁾",
                           marker: {size: 12, color: "orange", symbol: "star"}}));
    if (land.key_tips !== null) {
      const [heads, count] = land.key_tips.shape;
      for (let k = 0; k < heads; k++) {                          // one legend entry for every head's keys
        const tips = {shape: [count, 2], data: land.key_tips.data.slice(k * count * 2, (k + 1) * count * 2)};
        fig.data.push(scatter({x: column(tips, 0), y: column(tips, 1), mode: "markers",
                               name: k || heads === 1 ? `keys h${k}` : `keys, heads 0–${heads - 1}`,
                               legendgroup: "keys", showlegend: k === 0,
                               marker: {size: 8, symbol: "x", color: PALETTE[(k + 3) % PALETTE.length]}}));
      }
    }
    if (pinned !== null) {
      fig.data.push(scatter({x: column(pinned, 0), y: column(pinned, 1), mode: "lines+markers",
                             name: `x⁽ᵗ⁾ pinned: ${names[1]}`, hoverinfo: "skip",
                             line: {color: "rgba(255,255,255,0.75)", dash: "dash", width: 2},
                             marker: {size: 5, color: "rgba(255,255,255,0.75)"}}));
    }
    fig.data.push(scatter({x: [at(traj, last, 0)], y: [at(traj, last, 1)], mode: "markers", meta: NOW,
                           name: "x⁽ᵗ⁾ shown", hoverinfo: "skip",
                           marker: {size: 15, color: "#d62728", line: {color: "white", width: 2}}}));
    const plane = land.true_plane ? "the true plane (width 2)" : "the plane of x⁽⁰⁾, x⁽¹⁾, x⁽²⁾";
    fig.layout.legend = {orientation: "h", y: -0.22, yanchor: "top"};
    const a = land.a.data, b = land.b.data;
    return layout(fig, `Energy of token ${token}<br>on ${plane}`, "a", "b", height,
                  {range: [a[0], a[a.length - 1]]}, {range: [b[0], b[b.length - 1]]});
  }

  // -- cem_core/ui/playback.py ----------------------------------------------------------------------------------

  const PLOTS = ["energy", "norm", "landscape", "heatmap"];    // a phase's figures, by name, in the page's order
  const PICK = {energy: "customdata", norm: "customdata", heatmap: "y"};    // how a click there names a token

  // mirrors playback._per_token: step t on a per-token plot (values on the plot's axis)
  function perToken(name, values, firstStep, token, t, pinned) {
    const here = t - firstStep;
    return [{figure: name, meta: CURSOR, x: [t, t], y: cursorY(values, pinned)},
            {figure: name, meta: NOW, x: here >= 0 ? [t] : [], y: here >= 0 ? [at(values, here, token)] : []}];
  }

  // mirrors playback.frames: for t = 0..T, the updates that show step t
  function frames(phase, token, head, pinned) {
    const energies = onAxis(phase.energies, pinned && pinned.energies);
    const norms = onAxis(phase.update_norms, pinned && pinned.update_norms);
    const trajectory = phase.landscape.trajectory;
    const steps = energies.values.shape[0] - 1;
    const out = [];
    for (let t = 0; t <= steps; t++) {
      const frame = [...perToken("energy", energies.values, 0, token, t, energies.pinned),
                     ...perToken("norm", norms.values, 1, token, t, norms.pinned),
                     {figure: "landscape", meta: NOW, x: [at(trajectory, t, 0)], y: [at(trajectory, t, 1)]}];
      if (phase.weights !== null) {
        frame.push({figure: "heatmap", meta: WEIGHTS, z: {array: "weights", index: Math.max(t, 1) - 1},
                    title: heatmapTitle(t, steps, head)});
      }
      out.push(frame);
    }
    return out;
  }

  const BASE64 = new TextEncoder().encode("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/");

  // bytes in base64 (btoa would want them as a string, which is slow to build for a megabyte)
  function base64(bytes) {
    const out = new Uint8Array(4 * Math.ceil(bytes.length / 3)).fill(61);         // "=" pads the end
    let o = 0;
    for (let k = 0; k < bytes.length; k += 3) {
      const rest = bytes.length - k, n = (bytes[k] << 16) | ((rest > 1 ? bytes[k + 1] : 0) << 8)
        | (rest > 2 ? bytes[k + 2] : 0);
      out[o] = BASE64[n >>> 18];
      out[o + 1] = BASE64[(n >>> 12) & 63];
      if (rest > 1) out[o + 2] = BASE64[(n >>> 6) & 63];
      if (rest > 2) out[o + 3] = BASE64[n & 63];
      o += 4;
    }
    return new TextDecoder().decode(out);
  }

  // weights[:, head] of weights (T, H, n, n) in float32, rounded as numpy rounds
  function headWeights(weights, head) {
    const [steps, heads, n, m] = weights.shape, size = n * m;
    const out = new Float32Array(steps * size);
    for (let t = 0; t < steps; t++) {
      const start = (t * heads + head) * size;
      out.set(weights.data.subarray(start, start + size), t * size);
    }
    return out;
  }

  // mirrors playback.typed_array: Plotly's typed-array JSON, float32 in little-endian order (every browser's
  // platform order), base64
  function typedArray(values, shape) {
    return {dtype: "f4", shape, bdata: base64(new Uint8Array(values.buffer))};
  }

  // cyrb53, a cheap 53-bit hash of a text and 32-bit words: the version only has to change when the content does
  function hash(text, words) {
    let h1 = 0xdeadbeef, h2 = 0x41c6ce57;
    const mix = c => {
      h1 = Math.imul(h1 ^ c, 2654435761);
      h2 = Math.imul(h2 ^ c, 1597334677);
    };
    for (let k = 0; k < text.length; k++) mix(text.charCodeAt(k));
    for (let k = 0; k < words.length; k++) mix(words[k]);
    h1 = Math.imul(h1 ^ (h1 >>> 16), 2246822507) ^ Math.imul(h2 ^ (h2 >>> 13), 3266489909);
    h2 = Math.imul(h2 ^ (h2 >>> 16), 2246822507) ^ Math.imul(h1 ^ (h1 >>> 13), 3266489909);
    return (4294967296 * (2097151 & h2) + (h1 >>> 0)).toString(16);
  }

  // mirrors playback.view (start: the last step): the playback component's arguments for one phase, with a
  // version that changes when any of them does (a hash of the figures, frames and weights, not Python's sha1)
  function view(phase, figures, token, head, pinned) {
    const shown = PLOTS.filter(name => figures[name] !== null).map(name => ({name, figure: figures[name]}));
    const weights = phase.weights === null ? null : headWeights(phase.weights, head);
    const arrays = weights === null ? {} : {weights: typedArray(weights, [phase.weights.shape[0],
                                                                          ...phase.weights.shape.slice(2)])};
    const steps = phase.energies.shape[0] - 1;
    const payload = {figures: shown, frames: frames(phase, token, head, pinned), arrays, steps, start: steps,
                     pick: {...PICK}};
    const words = weights === null ? new Uint32Array(0) : new Uint32Array(weights.buffer);
    return {...payload, version: hash(JSON.stringify([shown, payload.frames]), words)};
  }

  // mirrors playback.pinned_path: the pinned phase's iterates in the plane of this phase's landscape, (k, 2), or
  // null in another width
  function pinnedPath(phase, pinned) {
    const {origin, basis} = phase.landscape, path = pinned.path;
    const [count, d] = path.shape;
    if (d !== origin.shape[0]) return null;
    const out = new Float64Array(count * 2);
    for (let t = 0; t < count; t++) {
      for (let j = 0; j < 2; j++) {
        let sum = 0;
        for (let k = 0; k < d; k++) sum += (path.data[t * d + k] - origin.data[k]) * basis.data[j * d + k];
        out[t * 2 + j] = sum;
      }
    }
    return {shape: [count, 2], data: out};
  }

  // -- app_pages/energy.py and cem_core/ui/energy_mode.py -------------------------------------------------------

  // energy_mode.PAGE_PLOTS and PRESENT_PLOTS: the page's plots, and presentation mode's
  const PAGE_PLOTS = {height: 330, landscape_extra: 60, legend: "all", relative: false, font_scale: 1.0};
  const PRESENT_PLOTS = {height: 250, landscape_extra: 0, legend: "followed", relative: true, font_scale: 1.25};

  // mirrors energy._relative: a phase whose energies are measured from their step 0, per token
  function relative(phase) {
    const e = phase.energies, n = e.shape[1];
    return {...phase, energies: {shape: e.shape, data: Float64Array.from(e.data, (v, k) => v - e.data[k % n])}};
  }

  // mirrors energy._phase_views: per phase of `data` (CEMExplore.explore(controls)), the playback component's
  // arguments drawn in `style` (PAGE_PLOTS or PRESENT_PLOTS). The pinned state (its controls and data, or null) is
  // drawn faint beside a phase of the same layer, and in presentation style the energies are drawn from step 0.
  function phaseViews(controls, data, pinnedControls, pinnedData, style) {
    const pinnedPhases = new Map(pinnedData ? pinnedData.phases.map(p => [p.name, p]) : []);
    const names = pinnedControls ? [changes(controls, pinnedControls), changes(pinnedControls, controls)] : null;
    const {token} = data, {height, legend} = style;
    return data.phases.map(current => {
      let phase = current, other = pinnedPhases.get(current.name) || null;
      const rel = style.relative && other !== null;
      if (rel) [phase, other] = [relative(phase), relative(other)];
      const overlay = other !== null ? names : null;
      const path = other === null ? null : pinnedPath(phase, other);         // null too in another width
      const head = phase.weights === null ? null : Math.min(controls.heat_head, phase.weights.shape[1] - 1);
      const title = rel ? "energy from step 0: E(x⁽ᵗ⁾) − E(x⁽⁰⁾)" : "energy E(x⁽ᵗ⁾ | c)";
      const figures = {
        energy: perTokenFigure(phase.energies, title, rel ? "energy from step 0" : "energy",
                               {rose: phase.rose, height, token, pinned: other && other.energies, names: overlay,
                                legend}),
        norm: perTokenFigure(phase.update_norms, "update norm |x⁽ᵗ⁺¹⁾ − x⁽ᵗ⁾|", "norm",
                             {firstStep: 1, height, token, pinned: other && other.update_norms, names: overlay,
                              legend}),
        landscape: landscapeFigure(phase.landscape, token, height + style.landscape_extra, path,
                                   path === null ? null : overlay),
        heatmap: head === null ? null : attentionHeatmapFigure(phase.weights, phase.weights.shape[0], head, height,
                                                               token)};
      return view(phase, figures, token, head || 0, other);
    });
  }

  // -- plotly.py's "plotly_white" template (figure_style.TEMPLATE), fresh for each figure ---------------------------

  const plasma = () => [[0.0, "#0d0887"], [0.1111111111111111, "#46039f"], [0.2222222222222222, "#7201a8"],
                        [0.3333333333333333, "#9c179e"], [0.4444444444444444, "#bd3786"],
                        [0.5555555555555556, "#d8576b"], [0.6666666666666666, "#ed7953"],
                        [0.7777777777777778, "#fb9f3a"], [0.8888888888888888, "#fdca26"], [1.0, "#f0f921"]];
  const colorscaled = type => [{type, colorbar: {outlinewidth: 0, ticks: ""}, colorscale: plasma()}];  // its 2-D traces
  const sceneAxis = () => ({                      // each axis of a 3-D scene
    "backgroundcolor": "white",
    "gridcolor": "#DFE8F3",
    "linecolor": "#EBF0F8",
    "showbackground": true,
    "ticks": "",
    "zerolinecolor": "#EBF0F8",
    "gridwidth": 2
  });
  const cartesian = () => ({                      // the x and y axes
    "gridcolor": "#EBF0F8",
    "linecolor": "#EBF0F8",
    "ticks": "",
    "title": {"standoff": 15},
    "zerolinecolor": "#EBF0F8",
    "automargin": true,
    "zerolinewidth": 2
  });
  const template = () => ({
    "data": {
      "histogram2dcontour": colorscaled("histogram2dcontour"),
      "choropleth": [{"type": "choropleth", "colorbar": {"outlinewidth": 0, "ticks": ""}}],
      "histogram2d": colorscaled("histogram2d"),
      "heatmap": colorscaled("heatmap"),
      "contourcarpet": [{"type": "contourcarpet", "colorbar": {"outlinewidth": 0, "ticks": ""}}],
      "contour": colorscaled("contour"),
      "surface": colorscaled("surface"),
      "mesh3d": [{"type": "mesh3d", "colorbar": {"outlinewidth": 0, "ticks": ""}}],
      "scatter": [{"fillpattern": {"fillmode": "overlay", "size": 10, "solidity": 0.2}, "type": "scatter"}],
      "parcoords": [{"type": "parcoords", "line": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "scatterpolargl": [{"type": "scatterpolargl", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "bar": [
        {
          "error_x": {"color": "#2a3f5f"},
          "error_y": {"color": "#2a3f5f"},
          "marker": {
            "line": {"color": "white", "width": 0.5},
            "pattern": {"fillmode": "overlay", "size": 10, "solidity": 0.2}
          },
          "type": "bar"
        }
      ],
      "scattergeo": [{"type": "scattergeo", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "scatterpolar": [{"type": "scatterpolar", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "histogram": [{"marker": {"pattern": {"fillmode": "overlay", "size": 10, "solidity": 0.2}}, "type": "histogram"}],
      "scattergl": [{"type": "scattergl", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "scatter3d": [
        {
          "type": "scatter3d",
          "line": {"colorbar": {"outlinewidth": 0, "ticks": ""}},
          "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}
        }
      ],
      "scattermap": [{"type": "scattermap", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "scatterternary": [{"type": "scatterternary", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "scattercarpet": [{"type": "scattercarpet", "marker": {"colorbar": {"outlinewidth": 0, "ticks": ""}}}],
      "carpet": [
        {
          "aaxis": {
            "endlinecolor": "#2a3f5f",
            "gridcolor": "#C8D4E3",
            "linecolor": "#C8D4E3",
            "minorgridcolor": "#C8D4E3",
            "startlinecolor": "#2a3f5f"
          },
          "baxis": {
            "endlinecolor": "#2a3f5f",
            "gridcolor": "#C8D4E3",
            "linecolor": "#C8D4E3",
            "minorgridcolor": "#C8D4E3",
            "startlinecolor": "#2a3f5f"
          },
          "type": "carpet"
        }
      ],
      "table": [
        {
          "cells": {"fill": {"color": "#EBF0F8"}, "line": {"color": "white"}},
          "header": {"fill": {"color": "#C8D4E3"}, "line": {"color": "white"}},
          "type": "table"
        }
      ],
      "barpolar": [
        {
          "marker": {
            "line": {"color": "white", "width": 0.5},
            "pattern": {"fillmode": "overlay", "size": 10, "solidity": 0.2}
          },
          "type": "barpolar"
        }
      ],
      "pie": [{"automargin": true, "type": "pie"}]
    },
    "layout": {
      "autotypenumbers": "strict",
      "colorway": [
        "#636efa", "#EF553B", "#00cc96", "#ab63fa", "#FFA15A", "#19d3f3", "#FF6692", "#B6E880", "#FF97FF", "#FECB52"
      ],
      "font": {"color": "#2a3f5f"},
      "hovermode": "closest",
      "hoverlabel": {"align": "left"},
      "paper_bgcolor": "white",
      "plot_bgcolor": "white",
      "polar": {
        "bgcolor": "white",
        "angularaxis": {"gridcolor": "#EBF0F8", "linecolor": "#EBF0F8", "ticks": ""},
        "radialaxis": {"gridcolor": "#EBF0F8", "linecolor": "#EBF0F8", "ticks": ""}
      },
      "ternary": {
        "bgcolor": "white",
        "aaxis": {"gridcolor": "#DFE8F3", "linecolor": "#A2B1C6", "ticks": ""},
        "baxis": {"gridcolor": "#DFE8F3", "linecolor": "#A2B1C6", "ticks": ""},
        "caxis": {"gridcolor": "#DFE8F3", "linecolor": "#A2B1C6", "ticks": ""}
      },
      "coloraxis": {"colorbar": {"outlinewidth": 0, "ticks": ""}},
      "colorscale": {
        "sequential": plasma(),
        "sequentialminus": plasma(),
        "diverging": [
          [0, "#8e0152"], [0.1, "#c51b7d"], [0.2, "#de77ae"], [0.3, "#f1b6da"], [0.4, "#fde0ef"], [0.5, "#f7f7f7"],
          [0.6, "#e6f5d0"], [0.7, "#b8e186"], [0.8, "#7fbc41"], [0.9, "#4d9221"], [1, "#276419"]
        ]
      },
      "xaxis": cartesian(),
      "yaxis": cartesian(),
      "scene": {"xaxis": sceneAxis(), "yaxis": sceneAxis(), "zaxis": sceneAxis()},
      "shapedefaults": {"line": {"color": "#2a3f5f"}},
      "annotationdefaults": {"arrowcolor": "#2a3f5f", "arrowhead": 0, "arrowwidth": 1},
      "geo": {
        "bgcolor": "white",
        "landcolor": "white",
        "subunitcolor": "#C8D4E3",
        "showland": true,
        "showlakes": true,
        "lakecolor": "white"
      },
      "title": {"x": 0.05}
    }
  });

  // the pieces other pages' figures are built from (inside_figures.js)
  const parts = {figure, layout, integerTicks, scatter, perTokenFigure, attentionHeatmapFigure, heatmapTitle, onAxis,
                 typedArray, hash, PALETTE, PINNED, CURSOR, NOW, WEIGHTS};
  globalThis.CEMFigures = {phaseViews, changes, PAGE_PLOTS, PRESENT_PLOTS, CONTROLS, parts};
})();
