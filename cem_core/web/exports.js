// The explorer's downloads: a figure's data as the CSV rows that the app's download button writes
// (cem_core/ui/exports.py: figure_rows and to_csv, with Python's csv module and number formats), and the chart as
// SVG (Plotly's own export; the PNG is the camera of the chart's toolbar, as in the app).
"use strict";

(function (root) {
  const SKIPPED = ["cursor", "now"];     // exports.figure_rows: playback's marks repeat the data (figure_style)
  // Python's figures hold their step numbers and matrix indices as ints and their values as floats
  // (descent_figures: ranges for the steps and rows), and its csv writes each as it is: 3 and 3.0. JSON.parse
  // drops the difference, so each figure names the axes Python writes as ints.
  const INTEGER = {energy: ["x"], norm: ["x"], heatmap: ["x", "y"]};

  function cell(value, integer) {         // csv: None as nothing, an int with str, a float with repr
    if (value === null || value === undefined) return "";
    if (typeof value === "string") return value;
    return integer ? String(value) : CEMFormat.floatRepr(value);
  }

  function range(n) {
    return Array.from({length: n}, (_, i) => i);
  }

  // exports.figure_rows: trace, x, y (and z for heatmaps and contours), in long format; `name` is the figure's
  // name among the page's plots (its integer axes).
  function figureRows(fig, name) {
    const ints = INTEGER[name] || [];
    const rows = [];
    for (const trace of fig.data) {
      if (SKIPPED.includes(trace.meta)) continue;
      const label = trace.name || trace.type;
      const x = v => cell(v, ints.includes("x")), y = v => cell(v, ints.includes("y"));
      if (trace.type === "heatmap" || trace.type === "contour") {
        const z = trace.z;
        const xs = trace.x || range(z[0].length), ys = trace.y || range(z.length);
        ys.forEach((yi, i) => xs.forEach((xj, j) => rows.push([label, x(xj), y(yi), cell(z[i][j], false)])));
      } else {
        trace.x.forEach((xi, k) => {
          if (xi !== null) rows.push([label, x(xi), y(trace.y[k]), ""]);   // not the breaks between segments
        });
      }
    }
    return rows;
  }

  function field(text) {                  // csv.QUOTE_MINIMAL: quoted where it holds , " or a line break
    return /[",\r\n]/.test(text) ? `"${text.replace(/"/g, '""')}"` : text;
  }

  // exports.to_csv: csv.DictWriter's header and rows, each line ended with \r\n
  function toCsv(fig, name) {
    return [["trace", "x", "y", "z"], ...figureRows(fig, name)].map(row => row.map(field).join(",") + "\r\n")
      .join("");
  }

  function slug(text) {                   // common._slug: the file's name
    return text.toLowerCase().replace(/[^a-z0-9]+/g, "-").replace(/^-+|-+$/g, "");
  }

  // A file saved by the browser (an <a download> of a Blob: it works from file:// and in the app's frame).
  function save(text, type, filename) {
    const url = URL.createObjectURL(new Blob([text], {type}));
    const link = Object.assign(document.createElement("a"), {href: url, download: filename});
    document.body.appendChild(link);
    link.click();
    link.remove();
    setTimeout(() => URL.revokeObjectURL(url), 1000);   // (some browsers lose a download revoked at once)
  }

  // The downloads of one phase's plots: per figure its CSV (the data of the state drawn) and its SVG (the chart as
  // shown, at the step shown). `figures` are the phase's [{name, figure}], `title(name)` names a figure's files
  // (slugged, as the app's) and `div(name)` gives its drawn chart. Called before the player draws them: playback
  // restyles the traces Plotly was given in place (the heatmap's z is the step shown), so the CSV keeps its own
  // copy of each trace as built, as the app's button writes the figure as built.
  function links(list, figures, title, div) {
    list.innerHTML = "";
    for (const {name, figure: built} of figures) {
      const figure = {...built, data: built.data.map(trace => ({...trace}))};
      const item = document.createElement("li");
      item.innerHTML = `<span class="name"></span><button type="button">CSV</button><button type="button">SVG</button>`;
      item.querySelector(".name").textContent = name;
      const [csv, svg] = item.querySelectorAll("button");
      const file = slug(title(name));
      csv.onclick = () => save(toCsv(figure, name), "text/csv", `${file}.csv`);
      svg.onclick = () => {                          // (nothing until the chart is drawn)
        if (div(name)) Plotly.downloadImage(div(name), {format: "svg", filename: file});
      };
      list.appendChild(item);
    }
  }

  root.CEMExports = {figureRows, toCsv, slug, links};
})(globalThis);
