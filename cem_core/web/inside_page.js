// The site's page "Inside a trained model" (inside.html): its controls, a learner's own points on the curve plot,
// the link and the playback. The state is the app's (InsideControls, its in_ link parameters), plus `points`: a
// learner's own context (in_points=x1:y1,x2:y2,…), which replaces the seed's function. What is computed: CEMGP
// (gp.js); what is drawn: CEMInside (inside_figures.js) through the app's player (player.js).
"use strict";

(function () {
  const DATA = globalThis.CEMSiteModels, C = DATA.controls, PREFIX = "in_";
  const PLOT_HEIGHT = 420, GRAB_PX = 12, DECIMALS = 3;
  const models = {};                                    // decoded on first use
  const functions = {};                                 // seed -> {xs, ys, truth}, from functions/<first>.js
  const el = (id) => document.getElementById(id);
  const state = {values: {...C.defaults}, points: null, lesson: null, present: false};   // lesson: its step, or null
  const PRESENT_HEIGHT = 330, PRESENT_FONTS = 1.25;       // app_pages/inside.py's presentation mode
  let player = null, grid = null, drag = null, pending = false;

  globalThis.CEMFunctions = {                           // what functions/<first>.js calls
    add(chunk) {
      const xs = CEMGP.decode(chunk.xs, 8), ys = CEMGP.decode(chunk.ys, 8), truth = CEMGP.decode(chunk.truth, 4);
      const N = xs.length / chunk.count, G = truth.length / chunk.count;
      for (let k = 0; k < chunk.count; k++) {
        functions[chunk.first + k] = {xs: xs.subarray(k * N, (k + 1) * N), ys: ys.subarray(k * N, (k + 1) * N),
                                      truth: truth.subarray(k * G, (k + 1) * G)};
      }
    },
  };

  function loadFunction(seed) {                         // the chunk of `seed`, as a classic script (file:// too)
    if (functions[seed]) return Promise.resolve(functions[seed]);
    const first = seed - (seed % DATA.chunk);
    return new Promise((done, fail) => {
      const script = document.createElement("script");
      script.src = `functions/${first}.js`;
      script.onload = () => done(functions[seed]);
      script.onerror = () => fail(new Error(`functions/${first}.js could not be read`));
      document.head.appendChild(script);
    });
  }

  const model = (name) => models[name] || (models[name] = CEMGP.loadModel(DATA.models[name]));
  const mostT = (name) => DATA.models[name].most_T;
  const label = (name) => C.labels[name] || name;

  // -- the link: mirrors InsideControls.from_link, settle and validation (the GP side's controls) --------------

  function explain(message) {                           // Controls.explain: "your points 2:0: ..." for "points='2:0' ..."
    const match = /^(\w+)=(.+?) is invalid: (.*)$/s.exec(message);
    return match === null ? message : `${label(match[1])} ${match[2].replace(/^'+|'+$/g, "")}: ${match[3]}`;
  }

  function invalid(name, raw, why) {
    return new Error(`${label(name)} ${raw}: ${why}`);
  }

  function fromLink(query) {
    // the GP side's values from a link's in_ parameters (others kept at their defaults), the notes of what was
    // changed, and a learner's points; an Error in the app's words for a bad value
    const values = {...C.defaults}, notes = [];
    if (query[PREFIX + "side"] === "lm") {
      notes.push("The language models are not on the site yet (the app has them): showing the GP side.");
    }
    const model = query[PREFIX + "gp_model"];
    if (model !== undefined) {
      if (!(model in DATA.models)) {
        throw invalid("gp_model", model, `must be one of ${Object.keys(DATA.models).map((m) => `'${m}'`).join(", ")}`);
      }
      values.gp_model = model;
      if (query[PREFIX + "gp_T"] === undefined) values.gp_T = DATA.models[model].trained_T;
    }
    for (const name of ["seed", "context", "gp_T"]) {
      const raw = query[PREFIX + name];
      if (raw === undefined) continue;
      if (!/^\s*[-+]?\d+\s*$/.test(raw)) throw invalid(name, raw, "cannot be read as a number");
      const value = Number(raw), [lo, hi] = C.specs[name][1];
      if (!(lo <= value && value <= hi)) throw invalid(name, value, `must be in [${lo}, ${hi}]`);
      values[name] = value;
    }
    if (values.seed >= DATA.seeds) {
      throw invalid("seed", values.seed, `the site carries the functions of seeds 0 to ${DATA.seeds - 1} (the app ` +
                                         `draws any seed to ${C.specs.seed[1][1]})`);
    }
    const most = mostT(values.gp_model);
    if (values.gp_T > most) {
      notes.push(`test-time T ${values.gp_T} → ${most}: ${values.gp_model} offers T up to ${most}.`);
      values.gp_T = most;
    }
    let points = null;
    if (query[PREFIX + "points"] !== undefined) {
      const parsed = CEMGP.parsePoints(query[PREFIX + "points"], DATA.models[values.gp_model].task);
      if (parsed.error) throw new Error(explain(parsed.error));
      points = parsed.points;
    }
    return {values, notes, points};
  }

  function query() {
    const out = {};
    for (const [key, value] of new URLSearchParams(location.search)) out[key] = value;
    return out;
  }

  function link() {                                     // the address of this state; other pages' parameters kept
    const params = new URLSearchParams(location.search);
    for (const name of ["side", "gp_model", "seed", "context", "gp_T"]) params.set(PREFIX + name, state.values[name]);
    if (state.points === null) params.delete(PREFIX + "points");
    else params.set(PREFIX + "points", CEMGP.formatPoints(state.points));
    if (state.lesson === null) params.delete("lesson"); else params.set("lesson", state.lesson.number);
    if (state.present) params.set("present", "true"); else params.delete("present");
    return `${location.pathname}?${params.toString().replace(/%3A/g, ":").replace(/%2C/g, ",")}`;
  }

  function message(kind, text) {
    const box = document.createElement("div");
    box.className = `box ${kind}`;
    box.textContent = text;
    el("messages").appendChild(box);
  }

  // -- the controls -------------------------------------------------------------------------------------------

  // A narrow window (explorer.css): the sidebar opens and closes behind the button above the page.
  function wireToggle() {
    const button = document.getElementById("controls-toggle");
    button.onclick = () => {
      const open = document.body.classList.toggle("controls-open");
      button.setAttribute("aria-expanded", String(open));
      button.textContent = open ? "✕ Hide the controls" : "☰ Controls";
    };
  }

  function setUp() {
    const select = el("gp_model");
    for (const [name, entry] of Object.entries(DATA.models)) select.add(new Option(`${name}: ${entry.title}`, name));
    el("seed").min = 0;
    el("seed").max = DATA.seeds - 1;
    el("context").min = C.specs.context[1][0];
    el("context").max = C.specs.context[1][1];
    select.onchange = () => {
      state.values.gp_model = select.value;
      state.values.gp_T = DATA.models[select.value].trained_T;
      update();
    };
    el("seed").onchange = () => {
      const seed = Number(el("seed").value);
      if (!(Number.isInteger(seed) && seed >= 0 && seed < DATA.seeds)) {
        el("messages").innerHTML = "";
        message("error", `function seed ${el("seed").value}: must be a whole number in [0, ${DATA.seeds - 1}]`);
        el("seed").value = state.values.seed;
        return;
      }
      state.values.seed = seed;
      state.points = null;
      update();
    };
    el("context").oninput = () => { state.values.context = Number(el("context").value); update(); };
    el("gp_T").oninput = () => { state.values.gp_T = Number(el("gp_T").value); update(); };
    el("undo-point").onclick = () => edit((points) => points.slice(0, -1));
    el("clear-points").onclick = () => edit(() => []);
    el("sample").onclick = () => { state.points = null; update(); };
    el("copy").onclick = () => navigator.clipboard && navigator.clipboard.writeText(el("link").value);
    player = CEMPlayer.create(el("playback"));
    const root = el("playback");
    root.addEventListener("mousedown", press, true);
    root.addEventListener("contextmenu", (event) => { if (curveAt(event)) event.preventDefault(); }, true);
    window.addEventListener("mousemove", move, true);
    window.addEventListener("mouseup", release, true);
    document.addEventListener("keydown", (event) => player.key(event));
  }

  function showControls() {
    const v = state.values, own = state.points !== null, most = mostT(v.gp_model);
    el("gp_model").value = v.gp_model;
    el("seed").value = v.seed;
    el("seed-out").textContent = own ? "(your points)" : "";
    el("context").value = v.context;
    el("context").disabled = own;
    el("context-out").textContent = own ? `${state.points.length} (yours)` : v.context;
    el("gp_T").max = most;
    el("gp_T").min = 1;
    el("gp_T").value = v.gp_T;
    el("gp_T-out").textContent = v.gp_T;
    el("gp_T-control").hidden = most === 1;
    el("undo-point").disabled = !own || !state.points.length;
    el("clear-points").disabled = own && !state.points.length;
    el("sample").disabled = !own;
  }

  // -- a learner's own points on the curve plot ----------------------------------------------------------------

  function curveAt(event) {                             // the curve plot's data coordinates under the pointer, or null
    const div = player && player.div("curve");
    if (!div || !div._fullLayout || !div.contains(event.target)) return null;
    const xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis, box = div.getBoundingClientRect();
    const px = event.clientX - box.left - xa._offset, py = event.clientY - box.top - ya._offset;
    if (px < 0 || px > xa._length || py < 0 || py > ya._length) return null;
    return {x: xa.p2l(px), y: ya.p2l(py), px, py, xa, ya};
  }

  function contextPoints() {                            // the points the model reads now, [[x, y], ...]
    if (state.points !== null) return state.points;
    const f = functions[state.values.seed];
    return Array.from({length: state.values.context}, (_, k) => [f.xs[k], f.ys[k]]);
  }

  function snap(x, y) {                                 // inside the box, to the link's decimals
    const [lo, hi] = DATA.models[state.values.gp_model].task.box, round = (v) => +v.toFixed(DECIMALS);
    return [round(Math.min(hi, Math.max(lo, x))), round(y)];
  }

  function nearest(at) {                                // the point within GRAB_PX of the pointer, or -1
    let best = -1, bestD = GRAB_PX;
    contextPoints().forEach(([x, y], k) => {
      const d = Math.hypot(at.xa.l2p(x) - at.px, at.ya.l2p(y) - at.py);
      if (d <= bestD) { best = k; bestD = d; }
    });
    return best;
  }

  function edit(change) {                               // a learner's change of the points (a copy of the seed's first)
    const limit = DATA.models[state.values.gp_model].task.n_points - 1;
    const points = change(contextPoints().map(([x, y]) => snap(x, y)));
    if (points.length > limit) {
      el("messages").innerHTML = "";
      message("warning", `At most ${limit} points: the model reads ${limit + 1} tokens, the last the query.`);
      return false;
    }
    state.points = points;
    update();
    return true;
  }

  function press(event) {
    const at = curveAt(event);
    if (!at) return;
    event.preventDefault();
    event.stopPropagation();                             // not Plotly's: no zoom box, no selection
    const k = nearest(at);
    const range = [...at.ya.range];                      // the axes stay still under the hand while it drags
    if (k >= 0 && (event.button === 2 || event.shiftKey)) edit((points) => points.filter((_, j) => j !== k));
    else if (k >= 0) drag = {index: k, range};
    else if (event.button === 0) {
      drag = {index: contextPoints().length, range};
      if (!edit((points) => [...points, snap(at.x, at.y)])) drag = null;
    }
  }

  function move(event) {
    if (drag === null) return;
    const div = player.div("curve"), xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
    const box = div.getBoundingClientRect();
    const [x, y] = snap(xa.p2l(event.clientX - box.left - xa._offset), ya.p2l(event.clientY - box.top - ya._offset));
    state.points = state.points.map((p, k) => (k === drag.index ? [x, y] : p));
    event.preventDefault();
    if (!pending) {                                      // one state per frame: the latest position wins
      pending = true;
      requestAnimationFrame(() => { pending = false; update(); });
    }
  }

  function release() {
    if (drag === null) return;
    drag = null;
    update();                                             // the axes fit the points again
  }

  // -- the state drawn -------------------------------------------------------------------------------------------

  async function update() {
    showControls();
    const v = state.values, m = model(v.gp_model), own = state.points !== null;
    const f = own ? null : await loadFunction(v.seed);
    const points = contextPoints();
    const T = m.most_T > 1 ? v.gp_T : null;
    const data = CEMGP.inspect(m, points.map((p) => p[0]), points.map((p) => p[1]), grid, T, own ? null : f.truth);
    let trained = null;
    if (data.layers.length && data.layers[0].T < data.trained_T) {
      trained = CEMGP.inspect(m, points.map((p) => p[0]), points.map((p) => p[1]), grid, null, null)
        .layers[0].rmse_to_posterior.slice(-1)[0];
    }
    el("note").innerHTML = markdown(CEMInside.gpReading(data, trained));
    const entry = DATA.models[v.gp_model];
    el("card").innerHTML = `<strong>${entry.name}</strong>: ${entry.title}; trained ${entry.steps.toLocaleString("en")} ` +
      `steps (seed ${entry.seed}); ${entry.metric.name} ${entry.metric.value.toFixed(3)}. Retrain: <code>` +
      `${entry.command}</code>.`;
    const present = state.present && state.lesson !== null, step = state.lesson;
    const figures = CEMInside.gpFigures(data, present ? PRESENT_HEIGHT : PLOT_HEIGHT, present ? "right" : "below");
    figures.curve.layout.dragmode = false;               // the plot's drag places points, it does not zoom
    if (drag !== null) figures.curve.layout.yaxis.range = drag.range;
    const args = CEMInside.gpView(data, figures, present ? step.views : CEMInside.GP_PLOTS, present ? PRESENT_FONTS : 1.0,
                                  "▶ plays the steps t = 0 … T; ← → step through them");
    args.start_key = step === null ? "free" : `lesson-${step.number}`;
    if (step !== null) args.highlight = step.points_at;
    args.prerender = drag === null;                       // the heatmap's steps are pre-rendered once the hand stops
    history.replaceState(null, "", link());
    el("link").value = location.href;
    const keep = new URLSearchParams(location.search);   // the other pages open with this state kept, not the lesson
    keep.delete("lesson");
    keep.delete("present");
    el("to-energy").href = `index.html?${keep}`;
    el("to-gp").href = `gp.html?${keep}`;
    lessonBar();
    document.body.dataset.state = JSON.stringify({...v, points: state.points});
    await player.render(args);
    document.body.dataset.ready = "true";
  }

  // -- the lesson's steps on this page (lesson_nav.js: the lesson across the site's pages) ---------------------

  function markdown(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/\*\*(.+?)\*\*/g, "<strong>$1</strong>")
      .replace(/\*(.+?)\*/g, "<em>$1</em>");
  }

  function lessonBar() {
    const step = state.lesson, present = state.present && step !== null;
    document.body.classList.toggle("present", present);
    el("present").checked = state.present;
    el("present-off").hidden = !present;
    el("lesson-bar").hidden = step === null;
    el("lesson-start").hidden = step !== null;
    el("intro").hidden = step !== null;
    el("bars").hidden = present;
    el("card").hidden = present;
    if (step === null) return;
    el("lesson-title").textContent = `Lesson · step ${step.number} of ${CEMLesson.total}: ${step.title}`;
    el("lesson-say").innerHTML = markdown(step.say);
    el("lesson-next").disabled = step.number === CEMLesson.total;
  }

  function wireLesson() {
    el("lesson-start").onclick = () => { CEMLesson.begin(); CEMLesson.go(1, state.present); };
    el("lesson-back").onclick = () => CEMLesson.go(state.lesson.number - 1, state.present);
    el("lesson-next").onclick = () => CEMLesson.go(state.lesson.number + 1, state.present);
    el("lesson-end").onclick = () => CEMLesson.end();
    const present = (on) => { state.present = on; update(); };
    el("present").onchange = () => present(el("present").checked);
    el("present-off").onclick = () => present(false);
  }

  function openLesson(query) {                          // a link's ?lesson=k: its step's state, or another page's
    const problem = CEMLesson.problem(query.lesson);
    if (problem !== null) {
      message("error", problem);
      return true;
    }
    const number = Number(query.lesson);
    if (CEMLesson.fileOf(number) !== "inside.html") {
      location.replace(CEMLesson.url(number, state.present));
      return false;
    }
    state.lesson = CEMLesson.step(number);
    state.values = {...C.defaults, ...state.lesson.state};
    return true;
  }

  async function start() {
    CEMPlayer.checkVersion();
    const n = DATA.grid, [lo, hi] = DATA.models[C.defaults.gp_model].task.box;
    grid = Float64Array.from({length: n}, (_, k) => lo + ((hi - lo) * k) / (n - 1));   // torch.linspace's points
    setUp();
    wireToggle();
    wireLesson();
    const q = query();
    state.present = ["true", "1"].includes((q.present || "false").toLowerCase());
    if (q.lesson !== undefined) {
      if (!openLesson(q)) return;
    } else {
      try {
        const read = fromLink(q);
        state.values = read.values;
        state.points = read.points;
        for (const note of read.notes) message("notice", note);
      } catch (err) {
        message("error", `The link's settings could not be used: ${err.message}. Showing the defaults instead.`);
      }
    }
    await update();
  }

  start();
})();
