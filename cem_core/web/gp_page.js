// The site's GP page (gp.html): the committed GP sweep's figures as the app's GP page draws them (exported at build
// time: CEMSiteData.gp_page, cem_core/ui/gp_figures.GP_SWEEP_VIEWS) with their words, and the lesson's step on it
// (?lesson=8): the step's words above, the plot it talks about framed; in presentation mode only the step's two
// plots, side by side and taller (app_pages/gp_recursion.presented). The sweep's live parts (a sampled function, a
// model trained now) need the app's server.
"use strict";

(function () {
  const DATA = globalThis.CEMSiteData, GP = DATA.gp_page, PRESENT_HEIGHT = 470, PRESENT_FONTS = 1.25;
  const $ = (id) => document.getElementById(id);
  const escaped = (t) => t.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  const markdown = (t) => escaped(t).replace(/\*\*(.+?)\*\*/g, "<strong>$1</strong>").replace(/\*(.+?)\*/g, "<em>$1</em>")
    .replace(/`(.+?)`/g, "<code>$1</code>");

  function scaled(layout, scale) {                        // presentation: every font of the figure larger
    const out = JSON.parse(JSON.stringify(layout));
    const grow = (node) => {
      if (!node || typeof node !== "object") return;
      for (const [key, value] of Object.entries(node)) {
        if (key === "size" && typeof value === "number") node[key] = Math.round(value * scale);
        else grow(value);
      }
    };
    grow(out);
    return out;
  }

  function table(rows) {                                 // a claims table (tables.verdict_first's rows)
    const t = document.createElement("table");
    t.className = "claims";
    const keys = rows.length ? Object.keys(rows[0]) : [];
    t.innerHTML = `<thead><tr>${keys.map((k) => `<th>${escaped(k)}</th>`).join("")}</tr></thead><tbody>` +
      rows.map((r) => `<tr>${keys.map((k) => `<td>${escaped(String(r[k]))}</td>`).join("")}</tr>`).join("") +
      "</tbody>";
    return t;
  }

  function paragraph(text, className) {
    const p = document.createElement("p");
    if (className) p.className = className;
    p.innerHTML = markdown(text);
    return p;
  }

  async function studies() {                              // the factor study and the test-time study, as the app's
    const where = $("studies"), study = GP.study, tt = GP.test_time;
    const heading = (text) => { const h = document.createElement("h3"); h.textContent = text; where.appendChild(h); };
    heading(GP.study_heading);
    study.images.forEach((image, k) => {
      const figure = document.createElement("figure");
      figure.innerHTML = `<img src="figures/${image.name}.png" alt="${escaped(image.alt)}"><figcaption></figcaption>`;
      figure.querySelector("figcaption").textContent = image.caption;
      where.appendChild(figure);
      if (k === 0) {
        where.appendChild(table(study.table));
        where.appendChild(paragraph(study.rule, "caption"));
      }
    });
    heading(GP.test_time_heading);
    for (const fig of tt.figures) {
      const plot = document.createElement("div");
      plot.className = "plot";
      where.appendChild(plot);
      await Plotly.newPlot(plot, fig.data, fig.layout, {displaylogo: false, responsive: true});
    }
    where.appendChild(paragraph(tt.summary));
    where.appendChild(table(tt.table));
    where.appendChild(paragraph(tt.rule, "caption"));
  }

  async function draw(step, present) {
    const views = $("views");
    views.innerHTML = "";
    views.classList.toggle("two", present && step !== null);
    const names = present && step !== null ? step.views : Object.keys(GP.views);
    for (const name of names) {
      const {figure, title, words} = GP.views[name];
      const box = document.createElement("section");
      box.className = "view";
      box.dataset.name = name;
      const plot = document.createElement("div");
      plot.className = "plot";
      plot.dataset.name = name;
      if (step !== null && step.points_at === name) plot.classList.add("pointed");
      box.appendChild(plot);
      if (!present) {
        const p = document.createElement("p");
        p.className = "caption";
        p.textContent = words;
        box.appendChild(p);
      }
      views.appendChild(box);
      const layout = present ? {...scaled(figure.layout, PRESENT_FONTS), height: PRESENT_HEIGHT} : figure.layout;
      await Plotly.newPlot(plot, figure.data, layout, {displaylogo: false, responsive: true,
                                                         toImageButtonOptions: {format: "png", filename: title}});
    }
  }

  function wire(step, present) {
    $("lesson-start").onclick = () => { CEMLesson.begin(); CEMLesson.go(1, present); };
    $("present").checked = present;
    $("present").onchange = () => {
      const q = new URLSearchParams(location.search);
      if ($("present").checked) q.set("present", "true"); else q.delete("present");
      location.search = q.toString();
    };
    $("present-off").onclick = () => { $("present").checked = false; $("present").onchange(); };
    $("controls-toggle").onclick = () => {
      const open = document.body.classList.toggle("controls-open");
      $("controls-toggle").setAttribute("aria-expanded", String(open));
      $("controls-toggle").textContent = open ? "✕ Hide the controls" : "☰ Controls";
    };
    if (step === null) return;
    $("lesson-back").onclick = () => CEMLesson.go(step.number - 1, present);
    $("lesson-next").onclick = () => CEMLesson.go(step.number + 1, present);
    $("lesson-next").disabled = step.number === CEMLesson.total;
    $("lesson-end").onclick = () => CEMLesson.end();
  }

  async function start() {
    const query = Object.fromEntries(new URLSearchParams(location.search));
    const present = ["true", "1"].includes((query.present || "false").toLowerCase());
    let step = null;
    if (query.lesson !== undefined) {
      const problem = CEMLesson.problem(query.lesson), file = problem === null && CEMLesson.fileOf(Number(query.lesson));
      if (problem !== null) {
        const box = document.createElement("div");
        box.className = "box error";
        box.textContent = problem;
        $("messages").appendChild(box);
      } else if (file !== "gp.html") {
        location.replace(CEMLesson.url(Number(query.lesson), present));           // another page's step: there
        return;
      } else step = CEMLesson.step(Number(query.lesson));
    }
    const keep = new URLSearchParams(location.search);   // the other pages open with their states kept
    keep.delete("lesson");
    keep.delete("present");
    $("to-energy").href = `index.html?${keep}`;
    $("to-inside").href = `inside.html?${keep}`;
    $("title").textContent = GP.title;
    $("intro-words").textContent = GP.intro;
    $("intro").hidden = step !== null;
    $("caption").textContent = `${GP.runs} runs of the committed sweep: depth-1 and depth-2 models trained on fresh ` +
      "GP functions (RBF kernel, 32 points); RMSE on a fixed held-out set. Command: `python -m cem_core gp sweep " +
      "--out results/gp-default --preset default`.";
    $("caption").hidden = present;
    document.body.classList.toggle("present", present && step !== null);
    $("present-off").hidden = !(present && step !== null);
    $("lesson-bar").hidden = step === null;
    $("lesson-start").hidden = step !== null;
    if (step !== null) {
      $("lesson-title").textContent = `Lesson · step ${step.number} of ${CEMLesson.total}: ${step.title}`;
      $("lesson-say").innerHTML = markdown(step.say);
    }
    wire(step, present);
    await draw(step, present);
    $("studies").hidden = step !== null;                    // a lesson step shows what it talks about
    if (step === null) await studies();
    document.body.dataset.ready = "true";
  }

  start();
})();
