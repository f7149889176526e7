// The static site's energy explorer: the app's energy page (app_pages/energy.py) with no server. Every change of a
// control recomputes in the browser (CEMExplore: the descent and its notes), builds the figures (CEMFigures) and
// redraws them (CEMPlayer, the app's own player); the controls read, validate and settle as the app's do
// (CEMControls), and the lesson's energy-page steps, pin-and-compare and share links work as in the app. The state
// lives in the URL (the app's parameter names), kept up to date with history.replaceState.
//
// Embedded in the app's energy page (app_pages/explorer.py: its bridge defines globalThis.CEMEmbed before this
// script runs), the page has no introduction, no lesson button and no link field (the app's address is the link):
// the server gives it a state with CEMExplorer.load(values, pinned), and once idle after a change it hands the
// state drawn and the pinned state to CEMEmbed.idle(values, pinned) instead of writing the address.
"use strict";

(function () {
  const DATA = globalThis.CEMSiteData, SPECS = DATA.controls.specs;
  const LAST = SPECS.token[1][1];              // the stored token that means "the last one" (energy.py LAST)
  const $ = id => document.getElementById(id);
  const EMBED = globalThis.CEMEmbed || null;     // the app's bridge, or null on the static site

  const page = {
    values: null,        // the state drawn: valid controls (the app's _controls_energy)
    widgets: null,       // the controls as set, which the cost may refuse (then the plots keep `values`)
    pinned: null,        // the pinned state's controls, or null
    lesson: null,        // the index into DATA.lesson of the step shown, or null
    present: false,      // presentation mode
    before: null,        // the state and pin the lesson's steps replaced, for End
    phases: [],          // per phase shown: its section's elements and player
    pinnedData: null,    // explore's data of the pinned state, and its controls as JSON
    serial: 0,           // the draws so far
    linked: false,       // a lesson step opened from a link (another page's Next or Back): End goes to its start
  };

  // -- text ------------------------------------------------------------------------------------------------------

  function escaped(text) {
    return text.replace(/&/g, "&amp;").replace(/</g, "&lt;").replace(/>/g, "&gt;");
  }

  // The Markdown the notes and the lesson's words use: **bold**, *emphasis*, `code`.
  function markdown(text) {
    return escaped(text).replace(/\*\*(.+?)\*\*/g, "<strong>$1</strong>").replace(/\*(.+?)\*/g, "<em>$1</em>")
      .replace(/`(.+?)`/g, "<code>$1</code>");
  }

  // A message, as literal text: the app shows every one through common.plain (a link's `*5*` stays `*5*`).
  function box(kind, text) {
    const div = document.createElement("div");
    div.className = `box ${kind}`;
    div.setAttribute("role", kind === "error" ? "alert" : "status");
    div.textContent = text;
    $("messages").appendChild(div);
  }

  // -- the lesson (cem_core/ui/lesson.py) -------------------------------------------------------------------------

  // lesson.missing_step: what a link's ?lesson= value that names no step of the lesson is told; and a step of
  // another page of the app, which this page has not.
  function lessonProblem(wanted) {
    if (!/^[0-9]{1,4}$/.test(wanted) || !(Number(wanted) >= 1 && Number(wanted) <= DATA.lesson_total)) {
      return `The link's lesson step ${CEMControls.strRepr(wanted)} does not exist: the lesson has steps 1 to ` +
        `${DATA.lesson_total}.`;
    }
    return null;
  }

  function goStep(index) {                       // lesson_mode.go: the step's complete state from a clean one
    if (page.lesson === null) page.before = {values: page.values, pinned: page.pinned};
    const step = DATA.lesson[index];
    page.lesson = index;
    page.pinned = step.pinned;
    $("messages").innerHTML = "";
    request({...step.state});
  }

  function endLesson() {                         // lesson_mode.end: the state from before, presentation mode off
    if (page.linked) return CEMLesson.end();      // a lesson come to from a link or another page: its start
    try { sessionStorage.removeItem("cem-lesson-before"); } catch (err) { console.warn(err); }
    const before = page.before;
    page.lesson = null;
    page.before = null;
    page.present = false;
    page.pinned = before.pinned;
    $("messages").innerHTML = "";
    request({...before.values});
  }

  // The lesson bar, and the page's parts that the mode shows or hides (energy.body, lesson_mode.bar).
  function lessonBar() {
    const index = page.lesson, bar = $("lesson-bar"), m = mode(page.present, index);
    document.body.classList.toggle("present", page.present);
    $("present").checked = page.present;
    $("present-off").hidden = !page.present;
    bar.hidden = index === null;
    $("lesson-start").hidden = index !== null;
    $("present-lesson-start").hidden = index !== null || !page.present;
    $("intro").hidden = !m.title;                 // in a lesson, its bar heads the page
    $("pin").hidden = !m.pin_buttons;
    $("share").hidden = page.present;             // (the room needs no link field)
    $("layer-caption").hidden = !m.layer_caption;
    $("row-controls").hidden = m.controls_at !== "row";
    $("beside").hidden = m.controls_at !== "beside words";
    placeControls(m);
    if (index === null) return;
    const step = DATA.lesson[index];
    $("lesson-title").textContent = `Lesson · step ${step.number} of ${DATA.lesson_total}: ${step.title}`;
    $("lesson-say").hidden = !m.bar_says;
    (m.bar_says ? $("lesson-say") : $("beside-say")).innerHTML = markdown(step.say);
    $("lesson-back").disabled = index === 0;
    $("lesson-next").disabled = step.number === DATA.lesson_total;      // past the last here: the next page's
  }

  // -- the mode: mirrors cem_core/ui/energy_mode.py EnergyMode ----------------------------------------------------

  // What the page shows with presentation mode `present` and the lesson step `lesson` (an index into DATA.lesson,
  // or null), field by field as EnergyMode names it (tests/test_site.py compares them).
  function mode(present, lesson) {
    const step = lesson === null ? null : DATA.lesson[lesson];
    const name = present ? (step ? "presented lesson" : "presentation") : (step ? "lesson" : "sidebar");
    const controlsAt = {presentation: "row", "presented lesson": "beside words"}[name] || "sidebar";
    const highlight = step ? step.points_at : null;
    return {
      name,
      title: name === "sidebar",
      controls: present ? (step ? step.used : DATA.present.controls) : null,
      controls_at: controlsAt,
      bar_says: controlsAt !== "beside words",
      note_beside_words: controlsAt === "beside words",
      pin_buttons: !present,
      pinned_caption: present,
      layer_caption: !present,
      details: !present,
      plots: present ? CEMFigures.PRESENT_PLOTS : CEMFigures.PAGE_PLOTS,
      views(available) {                        // the step's two (or PRESENT_VIEWS), filled up from PRESENT_VIEWS
        if (!present) return null;
        const names = (step ? step.views : DATA.present.views).filter(name => available.includes(name));
        return [...names, ...DATA.present.views.filter(name => !names.includes(name)).slice(0, 2 - names.length)];
      },
      highlight,
      note_above: highlight === "note",
      start_key: step ? `lesson-${step.number - 1}` : "free",   // (EnergyMode's lesson: the index of all steps)
    };
  }

  // -- the controls ----------------------------------------------------------------------------------------------

  const widgets = {};                            // name -> {row, input, output, set(value)}

  function number(name, value) {                 // a widget's text as its control's value
    return SPECS[name][0] === "float" ? Number(value) : Math.round(Number(value));
  }

  // A slider; `read` turns its position into the control's value.
  function slider(name, lo, hi, step, read = text => number(name, text)) {
    const row = document.createElement("div");
    row.innerHTML = `<label><span></span><output></output></label><input type="range">`;
    const input = row.querySelector("input"), output = row.querySelector("output");
    Object.assign(input, {min: lo, max: hi, step});
    input.addEventListener("input", () => change(name, read(input.value)));
    return {row, input, output, set(value) { input.value = String(value); output.textContent = format(name, value); }};
  }

  function format(name, value) {
    return SPECS[name][0] === "float" ? CEMFormat.formatG(value, 6) : String(value);
  }

  function makeWidget(name) {
    const [kind, allowed] = SPECS[name];
    let widget;
    if (name === "layer") {
      const row = document.createElement("div");
      row.setAttribute("role", "radiogroup");
      row.innerHTML = `<div class="label"><span></span></div>` + allowed.map(layer =>
        `<label class="radio"><input type="radio" name="layer" value="${layer}"> ` +
        `${escaped(DATA.controls.layer_labels[layer])}</label>`).join("");
      row.addEventListener("change", event => change("layer", event.target.value));
      widget = {row, input: row, set(value) { row.querySelector(`input[value=${value}]`).checked = true; }};
    } else if (kind === "choice") {
      const row = document.createElement("div");
      row.innerHTML = `<label><span></span></label><select>` +
        allowed.map(option => `<option>${option}</option>`).join("") + "</select>";
      const input = row.querySelector("select");
      input.addEventListener("change", () => change(name, input.value));
      widget = {row, input, set(value) { input.value = value; }};
    } else if (kind === "bool") {
      const row = document.createElement("div");
      row.classList.add("toggle");
      row.innerHTML = `<label><input type="checkbox"><span></span></label>`;
      const input = row.querySelector("input");
      input.addEventListener("change", () => change(name, input.checked));
      widget = {row, input, set(value) { input.checked = value; }};
    } else if (["width", "seq_len", "seed"].includes(name)) {          // energy.py: number inputs
      const row = document.createElement("div");
      row.innerHTML = `<label><span></span></label><input type="number" step="1">`;
      const input = row.querySelector("input");
      Object.assign(input, {min: allowed[0], max: allowed[1]});
      input.addEventListener("change", () => {                        // a number input keeps to its range
        const typed = input.value.trim() === "" ? NaN : Number(input.value);     // an emptied box keeps its value
        const value = Math.min(allowed[1], Math.max(allowed[0], Math.round(typed)));
        if (Number.isFinite(value)) change(name, value);
        else input.value = String(page.widgets[name]);
      });
      widget = {row, input, set(value) { input.value = String(value); }};
    } else if (name === "heads") {                // a select slider over the counts the width allows (heads_options)
      widget = slider(name, 0, 0, 1, text => widget.options[Number(text)]);
      widget.set = value => {
        widget.options = CEMControls.headsOptions(page.widgets.width, page.widgets.rope);
        widget.input.max = String(widget.options.length - 1);
        widget.input.value = String(widget.options.indexOf(value));
        widget.output.textContent = String(value);
      };
    } else if (name === "token" || name === "heat_head") {             // ranges that follow n and H
      widget = slider(name, 0, 1, 1);
    } else {
      widget = slider(name, allowed[0], allowed[1], kind === "float" ? allowed[2] : 1);
    }
    widget.row.classList.add("control");
    widget.row.dataset.control = name;
    const label = widget.row.querySelector("span");
    label.textContent = CEMControls.label(name);
    if (DATA.controls.helps[name]) widget.row.title = DATA.controls.helps[name];
    if (widget.input !== widget.row) widget.input.setAttribute("aria-label", CEMControls.label(name));
    else widget.row.setAttribute("aria-label", CEMControls.label(name));
    return widget;
  }

  function buildControls() {
    for (const [group, names] of Object.entries(DATA.controls.groups)) {   // EnergyControls.GROUPS
      const heading = document.createElement("h2");
      heading.textContent = group;
      $("controls").appendChild(heading);
      for (const name of names) {
        widgets[name] = makeWidget(name);
        widgets[name].home = document.createComment(name);                 // its place in the sidebar
        $("controls").append(widgets[name].row, widgets[name].home);
      }
    }
  }

  // Presentation mode draws the mode's controls on the page (a row above the plots, or stacked beside the step's
  // words), in that order; every other one stays in the sidebar, which it hides. The widgets move, their state
  // and handlers with them.
  function placeControls(m) {
    const at = {row: $("row-controls"), "beside words": $("beside-controls")}[m.controls_at];
    for (const [name, widget] of Object.entries(widgets)) {
      if (!(at && m.controls.includes(name)) && widget.row.parentNode !== $("controls")) {
        widget.home.before(widget.row);
      }
    }
    if (at) for (const name of m.controls) at.appendChild(widgets[name].row);
  }

  // The widgets show `page.widgets`, those that apply (EnergyControls.shown); the token's and the heatmap head's
  // ranges follow the sequence length and the heads, and RoPE is off at an odd width (energy.draw_control).
  function showWidgets() {
    const w = page.widgets, shown = CEMControls.shown(w.layer, w.preconditioner, w.diagonal);
    for (const [name, widget] of Object.entries(widgets)) {
      widget.row.hidden = !shown.includes(name) || (name === "heat_head" && w.heads <= 1);
      if (name === "token") {
        widget.input.max = String(w.seq_len - 1);
        widget.set(Math.min(w.token, w.seq_len - 1));
      } else if (name === "heat_head") {
        widget.input.max = String(Math.max(w.heads - 1, 0));
        widget.set(Math.min(w.heat_head, w.heads - 1));
      } else widget.set(w[name]);
    }
    widgets.rope.input.disabled = w.width % 2 === 1;
  }

  // -- a change, the way energy.page_controls reads one --------------------------------------------------------

  // Every state goes through one queue. A change is drawn at once when the page is idle; changes made while a state
  // is computed and drawn (a held key) wait, merged, and the latest is drawn next, once: the page never works
  // through a queue of stale states. A whole state (a link, a lesson step, End, a pin) replaces what waits.
  let pending = null, drawing = false;

  function change(name, value) {
    $("messages").innerHTML = "";
    pending = {...(pending || page.widgets), [name]: value};
    if (name === "token" && value >= pending.seq_len - 1) pending.token = LAST;   // the last stays the last
    request(pending);
  }

  function request(values) {
    document.body.dataset.state = "drawing";
    pending = values;
    if (!drawing) flush();
  }

  // Draw what waits until nothing does; then, idle, write the link (once, not per state drawn: browsers limit how
  // often a page may rewrite its address). An error is said on the page, and the next change starts afresh.
  async function flush() {
    drawing = true;
    try {
      while (pending !== null) {
        const next = pending;
        pending = null;
        await apply(next);
      }
      share();
    } catch (err) {
      pending = null;
      box("error", `Something went wrong drawing this state: ${err && err.message ? err.message : err}`);
      document.body.dataset.state = "error";
    } finally {
      drawing = false;
    }
  }

  // Settle the controls (options that make no sense together reset together, with a notice), then draw them, or,
  // where the cost refuses them, keep the plots of the last state that could be drawn, with the app's warning.
  function apply(given) {
    const {values, notes} = CEMControls.settle(given);
    values.token = values.token === LAST ? LAST : Math.min(values.token, values.seq_len - 1);
    values.heat_head = Math.min(values.heat_head, values.heads - 1);
    page.widgets = values;
    showWidgets();
    for (const note of notes) box("notice", note);
    let controls;
    try {
      controls = CEMControls.construct(values);
    } catch (err) {
      if (!(err instanceof CEMControls.ControlError)) throw err;
      box("warning", `${CEMControls.explain(err.message)}. The plots show the last state that could be drawn.`);
      lessonBar();
      document.body.dataset.state = "drawn";
      return Promise.resolve();
    }
    if (controls.token >= controls.seq_len - 1) controls.token = LAST;
    page.values = controls;
    return draw();
  }

  // -- drawing ---------------------------------------------------------------------------------------------------

  function explored(controls) {                 // the pinned state's data, computed once
    const key = JSON.stringify(controls);
    if (page.pinnedData === null || page.pinnedData.key !== key) {
      page.pinnedData = {key, data: CEMExplore.explore(controls)};
    }
    return page.pinnedData.data;
  }

  // equations.update_latex for a phase (its layer) and the controls: the build's lines, and the T-dependent last
  // (equations.steps_latex).
  function updateLatex(layer, c) {
    const key = [layer, c.diagonal, c.diagonal_form, c.anchor ? "anchored" : "free", c.preconditioner,
                 c.activation].join("|");
    const steps = c.T === 1 ? "t = 0" : c.T === 2 ? "t = 0, 1" : `t = 0, \\dots, ${c.T - 1}`;
    return [...DATA.equations.keys[key].map(i => DATA.equations.lines[i]),
            `${steps}, \\qquad h_i' = h_i + x^{(${c.T})} - x^{(0)}`];
  }

  function phaseSection() {
    const section = document.createElement("section");
    section.className = "phase";
    section.innerHTML = `<h3></h3><div class="note box"></div><div class="playback" tabindex="0"></div>
      <details class="downloads"><summary>Download the plots</summary><ul></ul>
        <p class="caption">PNG: the chart's camera icon</p></details>
      <details class="equations" open><summary>The update</summary><div class="lines"></div></details>`;
    const parts = {section, heading: section.querySelector("h3"), note: section.querySelector(".note"),
                   root: section.querySelector(".playback"), math: section.querySelector(".equations .lines"),
                   downloads: section.querySelector(".downloads ul"),
                   details: section.querySelectorAll(".downloads, .equations")};
    parts.player = CEMPlayer.create(parts.root, {onPick: token => change("token", token)});
    parts.root.addEventListener("keydown", parts.player.key);
    $("phases").appendChild(section);
    return parts;
  }

  // Once every player shows the latest state drawn, the body says so (data-state "drawn"; the tests wait for it).
  function whenDrawn(serial, versions) {
    if (serial !== page.serial || pending !== null) return;
    if (page.phases.every((parts, index) => parts.root.dataset.version === versions[index])) {
      document.body.dataset.state = "drawn";
    } else requestAnimationFrame(() => whenDrawn(serial, versions));
  }

  function draw() {
    const serial = ++page.serial;
    document.body.dataset.state = "drawing";
    const c = page.values, m = mode(page.present, page.lesson);
    const data = CEMExplore.explore(c);
    const notes = CEMExplore.diagnose(c, data);
    const pinnedData = page.pinned === null ? null : explored(page.pinned);
    const views = CEMFigures.phaseViews(c, data, page.pinned, pinnedData, m.plots);
    const renders = [], versions = [];
    while (page.phases.length > data.phases.length) page.phases.pop().section.remove();
    while (page.phases.length < data.phases.length) page.phases.push(phaseSection());
    data.phases.forEach((phase, index) => {
      const parts = page.phases[index], note = notes[index];
      parts.heading.hidden = data.phases.length === 1;
      parts.heading.textContent = `Phase ${index + 1}: ${DATA.controls.layer_labels[phase.name]}`;
      const beside = m.note_beside_words && index === 0;   // presented: the first note beside the step's words
      const box = beside ? $("beside-note") : parts.note, unused = beside ? parts.note : $("beside-note");
      if (index === 0) Object.assign(unused, {className: "box", textContent: ""});   // (no stale note left there)
      parts.note.hidden = beside;
      box.className = `note box ${note.level === "warning" ? "warning" : "info"}`;
      box.innerHTML = markdown(note.text);
      box.classList.toggle("pointed", m.note_above);
      parts.section.insertBefore(parts.note, m.note_above ? parts.root : parts.root.nextSibling);   // above: pointed at
      for (const details of parts.details) details.hidden = !m.details;
      CEMExports.links(parts.downloads, views[index].figures, name => `${c.layer} ${name} ${index}`,
                       parts.player.div);                                  // energy.phase_section's downloads
      const args = {...views[index], highlight: m.highlight, start_key: m.start_key};
      const shown = m.views(views[index].figures.map(f => f.name));
      const drawn = shown === null ? args : presented(args, shown, m.plots);
      versions.push(drawn.version);
      renders.push(parts.player.render(drawn));
      const lines = updateLatex(phase.name, c);
      if (parts.math.dataset.lines !== JSON.stringify(lines)) {           // typeset anew only when they change
        const math = parts.math, text = JSON.stringify(lines);
        Object.assign(math.dataset, {lines: text, typeset: "no"});
        math.innerHTML = lines.map(line => `<div>\\[${escaped(line)}\\]</div>`).join("");
        MathJax.Hub.Queue(["Typeset", MathJax.Hub, math], () => {
          if (math.dataset.lines === text) math.dataset.typeset = "yes";
        });
      }
    });
    $("layer-caption").textContent = DATA.controls.layer_captions[c.layer] || "";
    pinBar(m);
    lessonBar();
    whenDrawn(serial, versions);
    return Promise.all(renders);
  }

  // energy.phase_section in presentation mode: the two plots it shows, in its order, with larger fonts (the
  // landscape without its legend, which would take a third of its height)
  function presented(args, names, style) {
    const figures = args.figures.filter(f => names.includes(f.name))
      .sort((a, b) => names.indexOf(a.name) - names.indexOf(b.name))
      .map(f => f.name !== "landscape" ? f :
        {name: f.name, figure: {...f.figure, layout: {...f.figure.layout, showlegend: false}}});
    return {...args, font_scale: style.font_scale, version: `${args.version}-present`, figures};
  }

  // common.pin_bar, or in presentation mode energy.pinned_caption (beside the step's words in a lesson step)
  function pinBar(m) {
    $("pin").textContent = page.pinned === null ? "Pin this state" : "Unpin";
    let caption = "";
    if (page.pinned !== null) {
      const then = CEMFigures.changes(page.pinned, page.values), now = CEMFigures.changes(page.values, page.pinned);
      caption = m.pinned_caption ? `Pinned (faint, dashed): **${then}**; now: **${now}**.` :
        `Pinned: **${then}**, drawn faint and dashed; now: **${now}**.`;
    }
    $("pinned-caption").innerHTML = m.note_beside_words ? "" : markdown(caption);
    $("beside-pinned").innerHTML = m.note_beside_words ? markdown(caption) : "";
  }

  // -- the link --------------------------------------------------------------------------------------------------

  function share() {                            // common.keep_controls: the state into the URL
    if (EMBED !== null) {                       // the app keeps it (and writes its own address)
      EMBED.idle({...page.values}, page.pinned === null ? null : {...page.pinned});
      return;
    }
    const query = new URLSearchParams(CEMControls.toQuery(page.values));
    if (page.lesson !== null) query.set("lesson", String(DATA.lesson[page.lesson].number));
    if (page.present) query.set("present", "true");
    const own = new Set([...Object.keys(SPECS), "lesson", "present"]);    // another page's state stays in the address
    for (const [key, value] of new URLSearchParams(location.search)) {
      if (!own.has(key) && !query.has(key)) query.set(key, value);
    }
    const keep = new URLSearchParams(query);            // the other pages open with this state kept, not the lesson
    keep.delete("lesson");
    keep.delete("present");
    $("to-inside").href = `inside.html?${keep}`;
    $("to-gp").href = `gp.html?${keep}`;
    try {
      history.replaceState(null, "", `?${query}`);
    } catch (err) {                             // too many rewrites of the address: the link field still has it
      console.warn(err);
    }
    $("link").value = `${location.href.split("?")[0]}?${query}`;
  }

  async function copyLink() {
    const link = $("link");
    try {
      await navigator.clipboard.writeText(link.value);
    } catch (err) {                             // no clipboard API here (an old browser): the selection's copy
      link.select();
      document.execCommand("copy");
    }
    $("copy").textContent = "Copied";
    setTimeout(() => { $("copy").textContent = "Copy link"; }, 1500);
  }

  // The state a link opens: its lesson step (lesson_mode.start) and its controls over the step's state
  // (common.restore_controls), or the defaults with the app's messages.
  function open() {
    const query = Object.fromEntries(new URLSearchParams(location.search));
    page.present = ["true", "1"].includes((query.present || "false").toLowerCase());   // common.link_switch
    let base = {};
    if (query.lesson !== undefined) {
      const problem = lessonProblem(query.lesson);
      if (problem !== null) box("error", problem);
      else if (!DATA.lesson.some(step => step.number === Number(query.lesson))) {   // another page's step: there
        location.replace(CEMLesson.url(Number(query.lesson), page.present));
        return;
      } else {
        page.linked = true;
        const index = DATA.lesson.findIndex(step => step.number === Number(query.lesson));
        page.lesson = index;
        page.before = {values: {...DATA.controls.defaults}, pinned: null};
        page.pinned = DATA.lesson[index].pinned;
        base = CEMControls.toQuery(DATA.lesson[index].state);
      }
    }
    const {values, error, notes} = CEMControls.restore({...base, ...query});
    if (error !== null) box("error", error);
    for (const note of notes) box("info", note);
    page.values = values;
    request({...values});
  }

  // A state from the app's server (its kept controls and pinned state), drawn as a link's would be.
  function load(values, pinned) {
    page.pinned = pinned;
    $("messages").innerHTML = "";
    request({...values});
  }

  // A narrow window (explorer.css): the sidebar opens and closes behind the button above the page.
  function wireToggle() {
    const button = $("controls-toggle");
    button.onclick = () => {
      const open = document.body.classList.toggle("controls-open");
      button.setAttribute("aria-expanded", String(open));
      button.textContent = open ? "✕ Hide the controls" : "☰ Controls";
    };
  }

  function start() {
    if (EMBED !== null) document.body.classList.add("embedded");    // (explorer.css hides what the app has)
    buildControls();
    wireToggle();
    $("pin").onclick = () => {
      page.pinned = page.pinned === null ? {...page.values} : null;
      request({...(pending || page.widgets)});
    };
    $("copy").onclick = copyLink;
    const present = on => {                     // lesson_mode's presentation switch: the same state, drawn anew
      page.present = on;
      request({...(pending || page.widgets)});
    };
    $("present").onchange = () => present($("present").checked);
    $("present-off").onclick = () => present(false);
    $("lesson-start").onclick = $("present-lesson-start").onclick = () => { CEMLesson.begin(); goStep(0); };
    $("lesson-back").onclick = () => goStep(page.lesson - 1);
    $("lesson-next").onclick = () => (page.lesson + 1 < DATA.lesson.length ? goStep(page.lesson + 1)
      : CEMLesson.go(DATA.lesson[page.lesson].number + 1, page.present));       // on to the next page's steps
    $("lesson-end").onclick = endLesson;
    CEMPlayer.checkVersion();
    if (EMBED === null) open();                 // (embedded: the server's first state comes through load)
  }

  globalThis.CEMExplorer = {updateLatex, page, load, mode};   // (page, updateLatex and mode for the tests)
  start();
})();
