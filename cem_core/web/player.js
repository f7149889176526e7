// Step playback of one descent: the drawing core shared by the app's component (app_pages/playback/, which talks to
// Streamlit) and the static site (cem_core/web/explorer.js, which computes in the browser). Its arguments are what
// cem_core/ui/playback.py `view` builds (or cem_core/web/figures.js, the same in the browser): the figures once per
// state, with every step's updates; play, pause, step and the scrubber apply them here, to the traces named by their
// `meta`. A page makes one player per phase: `CEMPlayer.create(root, {onPick})` builds the bar and the grid inside
// `root` and returns {render(args), key(event), parts, div(name): a figure's chart}; a click on a line or a heatmap
// row calls onPick(token).
// `root.dataset` holds the step, the version and whether the heatmap's images are ready (read by the tests).
"use strict";

(function () {
  // Written and tested against this plotly.js. movePoints and heatmapImage read Plotly's drawing beyond its public
  // API (an axis's c2p through _fullLayout, the .scatterlayer and .heatmaplayer nodes). On another version the page
  // says so above the plots (and in the console), and tests/test_playback.py fails, instead of drawing a step wrong
  // in silence; check those two functions against the new version, then change this line.
  const PLOTLY_WRITTEN_FOR = "4.1.1";
  const PRERENDER_DELAY_MS = 150;   // a state shown this long is worth pre-rendering (keys held: the next comes sooner)
  const BAR = `
    <button class="first" title="back to step 0 (Home)" aria-label="first step">|◀</button>
    <button class="prev" title="one step back (←)" aria-label="previous step">◀</button>
    <button class="play" title="play / pause (space)" aria-label="play">▶</button>
    <button class="next" title="one step on (→)" aria-label="next step">▶|</button>
    <input class="scrub" type="range" min="0" max="1" step="1" value="0" aria-label="step t">
    <span class="label">step 0 of 0</span>
    <span class="hint">click a line or a heatmap row to follow that token</span>`;

  const timing = {frameTimes: [], applied: 0};   // read by the browser tests and benchmarks/browser_latency.py

  function decode(spec) {            // the weights, (steps, rows, cols) -> rows of Float32Array per step
    let flat = spec.data;            // a Float32Array (figures.js) or Plotly's typed-array JSON ({bdata, dtype, shape})
    if (spec.bdata !== undefined) {
      const bytes = Uint8Array.from(atob(spec.bdata), c => c.charCodeAt(0));
      flat = new Float32Array(bytes.buffer);
    }
    const [steps, rows, cols] = spec.shape;
    return Array.from({length: steps}, (_, s) =>
      Array.from({length: rows}, (_, i) => flat.subarray((s * rows + i) * cols, (s * rows + i + 1) * cols)));
  }

  function scaled(layout, scale) {   // presentation mode: every font of the figure larger
    const out = JSON.parse(JSON.stringify(layout));
    const grow = obj => {
      for (const [k, v] of Object.entries(obj)) {
        if (k === "template") continue;
        if (k === "size" && typeof v === "number") obj[k] = Math.round(v * scale);
        else if (v && typeof v === "object") grow(v);
      }
    };
    grow(out);
    return out;
  }

  function traceIndex(div, meta) {
    return div.data.findIndex(trace => trace.meta === meta);
  }

  // A marker on a plot with contours is moved on its SVG node: Plotly would redraw every contour for it (a
  // restyle), or drop them (an animation). Its data are updated too, and the move is made again after any redraw
  // of the plot (a resize), so Plotly's own drawing agrees.
  function movePoints(div, index, xs, ys) {
    const scatter = div.data.slice(0, index).filter(trace => trace.type === "scatter").length;
    const layer = div.querySelectorAll(".scatterlayer .trace")[scatter];
    const points = layer ? layer.querySelectorAll(".points path") : [];
    if (div.data[index].type !== "scatter" || points.length !== xs.length) return false;
    const xa = div._fullLayout.xaxis, ya = div._fullLayout.yaxis;
    points.forEach((p, k) => p.setAttribute("transform", `translate(${xa.c2p(xs[k])},${ya.c2p(ys[k])})`));
    div.data[index].x = xs;
    div.data[index].y = ys;
    (div.moved = div.moved || {})[index] = [xs, ys];
    return true;
  }

  // A heatmap is an image Plotly renders from z. Each step's image is rendered once (heatmapImages, after the
  // first draw) and playback swaps the image: a restyle costs a frame of its own. Once the reader rests on a step,
  // the heatmap is restyled to it, so that hover and any redraw show that step's weights.
  function heatmapImage(div) {
    const image = div.querySelector(".heatmaplayer image");
    return image ? image.getAttribute("href") || image.getAttribute("xlink:href") : null;
  }

  // `fn` one call at a time: calls made while one runs collapse into the latest, which runs next.
  // After the next paint: a frame's callbacks run before it is painted, a task queued from them after.
  const painted = () => new Promise(resolve => requestAnimationFrame(() => setTimeout(resolve, 0)));

  function latestOnly(fn) {
    let busy = false, waiting = false, latest;
    return async arg => {
      latest = arg;
      waiting = true;
      if (busy) return;
      busy = true;
      try {
        while (waiting) {
          waiting = false;
          await fn(latest);
        }
      } finally {
        busy = false;                                    // a failed draw leaves the player free for the next
      }
    };
  }

  function create(root, hooks = {}) {
    const bar = document.createElement("div");
    bar.className = "bar";
    bar.setAttribute("role", "toolbar");
    bar.setAttribute("aria-label", "step playback");
    bar.innerHTML = BAR;
    const grid = document.createElement("div");
    grid.className = "grid";
    root.classList.add("player");
    root.append(bar, grid);
    const part = name => bar.querySelector(`.${name}`);
    const parts = {bar, grid, first: part("first"), prev: part("prev"), play: part("play"), next: part("next"),
                   scrub: part("scrub"), label: part("label"), hint: part("hint")};
    const view = {version: null, args: null, divs: {}, t: 0, steps: 0, timer: null, arrays: {}};

    function pickToken(name, point) {
      const how = (view.args.pick || {})[name];
      if (how === "customdata" && Number.isInteger(point.customdata)) return point.customdata;
      if (how === "y" && Number.isInteger(point.y)) return point.y;
      return null;
    }

    // A new state of the same plots updates them in place (Plotly.react: only what changed is redrawn, and the
    // reader's zoom stays); other plots (another layer, presentation mode) are built afresh.
    async function build(args) {
      const names = args.figures.map(f => f.name);
      const same = names.length === grid.children.length &&
        names.every((n, i) => grid.children[i].dataset.name === n);
      if (!same) {
        for (const div of Object.values(view.divs)) Plotly.purge(div);
        grid.innerHTML = "";
        view.divs = {};
      }
      grid.style.gridTemplateColumns = `repeat(${args.columns || 2}, minmax(0, 1fr))`;
      root.classList.toggle("big", (args.font_scale || 1) > 1);
      view.arrays = Object.fromEntries(Object.entries(args.arrays || {}).map(([k, spec]) => [k, decode(spec)]));
      delete root.dataset.images;
      for (const [index, {name, figure}] of args.figures.entries()) {
        if (index === 1) await painted();                  // the first plot is on the screen before the others
        // the toolbar's camera saves the chart as shown, at the step shown (app_pages/common.chart_config's options)
        const config = {displaylogo: false, responsive: true,
                        toImageButtonOptions: {format: "png", filename: `cem-${name}`, scale: 2}};
        const layout = scaled(figure.layout, args.font_scale || 1);
        let div = view.divs[name];
        if (div) {
          div.moved = {};                                  // the old state's marker positions
          div.spec = {data: JSON.parse(JSON.stringify(figure.data)), layout};
          await Plotly.react(div, figure.data, layout, config);
        } else {
          div = document.createElement("div");
          div.className = "plot";
          div.dataset.name = name;
          grid.appendChild(div);
          view.divs[name] = div;
          div.spec = {data: JSON.parse(JSON.stringify(figure.data)), layout};
          await Plotly.newPlot(div, figure.data, layout, config);
          div.on("plotly_afterplot", () => {
            for (const [index, [xs, ys]] of Object.entries(div.moved || {})) movePoints(div, Number(index), xs, ys);
          });
          div.on("plotly_click", event => {
            const token = event.points.length ? pickToken(name, event.points[0]) : null;
            if (token !== null && hooks.onPick) hooks.onPick(token);
          });
        }
        div.images = null;
      }
    }

    async function heatmapImages(div, array, version) {
      // Rendered on a hidden copy of the plot, the same size, so the page does not flicker through the steps. A
      // newer state (a held key) stops it: the stale state's images would only hold the page up.
      const stale = () => view.version !== version;
      await new Promise(done => setTimeout(done, PRERENDER_DELAY_MS));
      if (stale()) return;
      const ghost = document.createElement("div");
      ghost.style.cssText = `position: absolute; left: -10000px; top: 0; width: ${div.clientWidth}px;`;
      document.body.appendChild(ghost);
      await Plotly.newPlot(ghost, div.spec.data, div.spec.layout, {staticPlot: true});
      const index = ghost.data.findIndex(trace => trace.type === "heatmap");
      const images = [];
      for (const z of view.arrays[array]) {
        if (stale()) break;
        await Plotly.restyle(ghost, {z: [z]}, [index]);
        images.push(heatmapImage(ghost));
      }
      Plotly.purge(ghost);
      ghost.remove();
      if (stale()) return;
      if (images.every(Boolean)) div.images = {array, images, index, shown: null};
      root.dataset.images = "ready";
    }

    function showImage(div, ref) {
      const cache = div.images;
      const image = div.querySelector(".heatmaplayer image");
      if (!cache || cache.array !== ref.array || !image || !cache.images[ref.index]) return false;
      image.setAttribute("href", cache.images[ref.index]);
      cache.shown = ref.index;
      clearTimeout(cache.rest);
      cache.rest = setTimeout(() => Plotly.restyle(div, {z: [view.arrays[ref.array][cache.shown]]}, [cache.index]),
                              250);
      return true;
    }

    function apply(t) {
      const start = performance.now();
      view.t = t;
      const frame = view.args.frames[t];
      const calls = [];
      const byFigure = {};
      for (const update of frame) (byFigure[update.figure] = byFigure[update.figure] || []).push(update);
      for (const [name, updates] of Object.entries(byFigure)) {
        const div = view.divs[name];
        if (!div) continue;
        const indices = [], data = {x: [], y: [], z: []};
        let hasXY = false, hasZ = false;
        for (const u of updates) {
          if (u.title !== undefined) {
            // The title is set on its SVG node (and in the layout, for Plotly's own redraws): a relayout would
            // redraw the figure in another frame and double the step's time.
            div.layout.title.text = u.title;
            const node = div.querySelector(".gtitle");
            if (node) node.textContent = u.title;
          }
          if (u.meta === undefined) continue;
          const index = traceIndex(div, u.meta);
          if (index < 0 || (u.z && showImage(div, u.z))) continue;    // a pre-rendered heatmap step: swapped
          const z = u.z ? view.arrays[u.z.array][u.z.index] : undefined;
          indices.push(index);
          data.x.push(u.x);
          data.y.push(u.y);
          hasXY = hasXY || u.x !== undefined;
          data.z.push(z);
          hasZ = hasZ || z !== undefined;
        }
        if (!indices.length) continue;
        const animatable = div.data.every(trace => trace.type === "scatter");
        if (!hasZ && !animatable && indices.every((index, k) => movePoints(div, index, data.x[k], data.y[k]))) {
          continue;
        }
        if (!hasZ && animatable) {
          // Points only, on a plot of scatter traces only: an animation frame of zero duration moves them without
          // redrawing the others.
          const traces = indices.map((_, k) => (data.x[k] === undefined ? {y: data.y[k]} :
                                                {x: data.x[k], y: data.y[k]}));
          calls.push(Plotly.animate(div, {data: traces, traces: indices},
                                    {transition: {duration: 0}, frame: {duration: 0, redraw: false},
                                     mode: "immediate"}));
        } else {
          const restyle = {};
          if (hasXY) { restyle.x = data.x; restyle.y = data.y; }
          if (hasZ) restyle.z = data.z;
          calls.push(Plotly.restyle(div, restyle, indices));
        }
      }
      parts.scrub.value = String(t);
      parts.label.textContent = `step ${t} of ${view.steps}`;
      root.dataset.step = String(t);
      // Plotly resolves inside the animation frame that draws the update; a message posted then is handled once
      // that frame is painted, so a frame's time runs from the input to the painted step.
      return Promise.all(calls).then(() => new Promise(done => {
        const channel = new MessageChannel();
        channel.port1.onmessage = () => {
          timing.frameTimes.push(performance.now() - start);
          timing.applied += 1;
          done();
        };
        channel.port2.postMessage(0);
      }));
    }

    function stop() {
      if (view.timer !== null) clearInterval(view.timer);
      view.timer = null;
      parts.play.textContent = "▶";
      parts.play.setAttribute("aria-label", "play");
    }

    function play() {
      if (view.timer !== null) return stop();
      if (view.t >= view.steps) show(0);
      parts.play.textContent = "❚❚";
      parts.play.setAttribute("aria-label", "pause");
      view.timer = setInterval(() => {
        if (view.t >= view.steps) return stop();
        show(view.t + 1);
      }, view.args.interval_ms || 700);
    }

    // One step is drawn at a time: steps asked for while one is being drawn (a fast drag of the scrubber) collapse
    // into the latest, so the view never lags behind the hand.
    const show = latestOnly(apply);

    function go(t) {
      stop();
      show(Math.max(0, Math.min(view.steps, t)));
    }

    parts.first.onclick = () => go(0);
    parts.prev.onclick = () => go(view.t - 1);
    parts.next.onclick = () => go(view.t + 1);
    parts.play.onclick = play;
    parts.scrub.oninput = event => go(Number(event.target.value));

    // ←, →, Home, End and space; on the scrubber only space (the range input moves itself).
    function key(event) {
      if (view.args === null || (event.target.tagName === "INPUT" && event.key !== " ")) return false;
      const moves = {ArrowLeft: view.t - 1, ArrowRight: view.t + 1, Home: 0, End: view.steps};
      if (event.key in moves) go(moves[event.key]);
      else if (event.key === " ") play();
      else return false;
      event.preventDefault();
      return true;
    }

    async function cacheImages() {
      const version = view.version;
      for (const update of view.args.frames[0]) {
        const div = view.divs[update.figure];
        if (update.z && div && !div.images) await heatmapImages(div, update.z.array, version);
      }
    }

    async function render(args) {
      const previous = view.args && view.args.start_key === args.start_key ?
        {t: view.t, steps: view.steps, version: view.version} : null;             // null: start afresh
      view.args = args;
      if (args.version !== view.version) {
        stop();
        await build(args);
        view.version = args.version;
      }
      for (const [name, div] of Object.entries(view.divs)) div.classList.toggle("pointed", name === args.highlight);
      view.steps = args.steps;
      if (args.hint !== undefined) parts.hint.textContent = args.hint;
      parts.scrub.max = String(args.steps);
      // A new state starts at the step it asks for (the whole descent by default); a changed T keeps the reader's
      // step, or follows to the new last step when the reader was at the last one.
      const t = previous === null ? args.start :
        previous.t >= previous.steps ? args.steps : Math.min(previous.t, args.steps);
      await show(t);
      root.dataset.version = args.version;
      // (no-op where the images are there; `prerender: false` while a state is still moving, a point dragged)
      if ((!previous || args.version !== previous.version) && args.prerender !== false) cacheImages();
    }

    // States that arrive while one is being drawn (a held key) collapse into the latest, so the browser never
    // draws a state that is already stale.
    return {render: latestOnly(render), key, parts, div: name => view.divs[name]};
  }

  // Once per page: on another plotly.js than the one written for, a warning above everything.
  function checkVersion() {
    if (Plotly.version !== PLOTLY_WRITTEN_FOR) {
      const warning = document.createElement("p");
      warning.id = "plotly-version";
      warning.setAttribute("role", "alert");
      warning.style.cssText = "margin: 0 0 0.5rem; padding: 0.4rem 0.6rem; background: #fde8e8; color: #8a1c1c;";
      warning.textContent = `The step playback was written for plotly.js ${PLOTLY_WRITTEN_FOR} and this page runs ` +
        `${Plotly.version}: moved markers and heatmap steps may be drawn wrong. Install the plotly of ` +
        "requirements.txt.";
      document.body.prepend(warning);
      console.error(warning.textContent);
    }
  }

  globalThis.CEMPlayer = {create, checkVersion, timing, PLOTLY_WRITTEN_FOR};
})();
