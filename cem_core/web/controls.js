// The energy page's controls in the browser: reading a link, validating a state and settling dependent controls, with
// the app's words. Each function mirrors the Python it names (cem_core/ui/controls.py EnergyControls, the configs'
// validation in cem_core/nn/config.py and validate.py, app_pages/common.py restore_controls), reading the specs,
// labels and ranges the site's build exported (CEMSiteData.controls, from cem_core/ui/site_data.py); a refusal is a
// ControlError whose message is Python's ValueError text. Python's own renderings are mirrored where a message
// shows a value: repr of a str and of a float (figures.js's), str of an int, float() and int() of a link's text.
"use strict";

(function () {
  const C = () => globalThis.CEMSiteData.controls;

  class ControlError extends Error {}

  // -- Python's renderings and parsers -------------------------------------------------------------------------

  // repr (= str) of a Python float, and format(x, "g"): CEMFigures' mirrors of Python's.
  const floatRepr = x => globalThis.CEMFormat.floatRepr(x);
  const formatG = x => globalThis.CEMFormat.formatG(x, 6);

  // Python's str.isprintable() is false for these categories (the space excepted): repr escapes them.
  const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

  // repr(s) of a Python str: single quotes unless it holds ' and no ", backslash escapes as unicode_repr writes them.
  function strRepr(s) {
    const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
    let out = quote;
    for (const ch of s) {
      const code = ch.codePointAt(0);
      if (ch === quote || ch === "\\") out += "\\" + ch;
      else if (ch === "\t") out += "\\t";
      else if (ch === "\n") out += "\\n";
      else if (ch === "\r") out += "\\r";
      else if (code < 0x20 || code === 0x7f) out += "\\x" + code.toString(16).padStart(2, "0");
      else if (code < 0x7f || (ch !== " " && !UNPRINTABLE.test(ch))) out += ch;
      else if (code <= 0xff) out += "\\x" + code.toString(16).padStart(2, "0");
      else if (code <= 0xffff) out += "\\u" + code.toString(16).padStart(4, "0");
      else out += "\\U" + code.toString(16).padStart(8, "0");
    }
    return out + quote;
  }

  // str.strip() of int() and float(): Python's whitespace (Py_UNICODE_ISSPACE), which is not JavaScript's \s.
  const SPACE = "[\\t\\n\\v\\f\\r\\x1c-\\x20\\x85\\xa0\\u1680\\u2000-\\u200a\\u2028\\u2029\\u202f\\u205f\\u3000]";
  const STRIP = new RegExp(`^${SPACE}+|${SPACE}+$`, "g");

  // int() and float() read any Unicode decimal digit (category Nd) as its ASCII digit. Nd digits come in runs of
  // 0 to 9 (runs of 50 are five of them), so a digit's value is its distance from its run's start, modulo 10.
  function asciiDigits(text) {
    return text.replace(/\p{Nd}/gu, ch => {
      const code = ch.codePointAt(0);
      let start = code;
      while (/\p{Nd}/u.test(String.fromCodePoint(start - 1))) start -= 1;
      return String((code - start) % 10);
    });
  }

  const DIGITS = "\\d(?:_?\\d)*";                                  // PEP 515: an underscore between two digits
  const INT = new RegExp(`^[+-]?${DIGITS}$`);
  const FLOAT = new RegExp(`^[+-]?(?:(?:${DIGITS})?\\.${DIGITS}|${DIGITS}\\.?)(?:[eE][+-]?${DIGITS})?$`);
  const SPECIAL = /^([+-]?)(inf|infinity|nan)$/i;
  const INT_MAX_STR_DIGITS = 4300;                                 // sys.get_int_max_str_digits(): more is refused

  // int(text) as a BigInt, or null where Python raises ValueError.
  function pyInt(text) {
    const s = asciiDigits(text.replace(STRIP, ""));
    if (!INT.test(s) || s.replace(/[^0-9]/g, "").length > INT_MAX_STR_DIGITS) return null;
    return BigInt(s.replace(/_/g, ""));
  }

  // float(text), or null where Python raises ValueError.
  function pyFloat(text) {
    const s = asciiDigits(text.replace(STRIP, ""));
    const special = SPECIAL.exec(s);
    if (special) return special[2].toLowerCase() === "nan" ? NaN : special[1] === "-" ? -Infinity : Infinity;
    return FLOAT.test(s) ? Number(s.replace(/_/g, "")) : null;
  }

  // -- validation: cem_core/nn/validate.py ---------------------------------------------------------------------

  const isInt = v => typeof v === "bigint" || Number.isInteger(v);

  // fail(field, value, allowed), the value as Python's repr shows it (its kind says which repr).
  function fail(name, value, kind, allowed) {
    const shown = kind === "float" ? floatRepr(value) : typeof value === "string" ? strRepr(value) : String(value);
    throw new ControlError(`${name}=${shown} is invalid: ${allowed}`);
  }

  function checkInt(name, value, lo, hi) {                         // validate.check_int
    if (value < lo || (hi !== null && value > hi)) {
      fail(name, value, "int", hi !== null ? `must be in [${lo}, ${hi}]` : `must be >= ${lo}`);
    }
  }

  function checkFloat(name, value, lo, strict) {                   // validate.check_float
    if (!Number.isFinite(value)) fail(name, value, "float", "must be a finite number");
    if (value < lo || (strict && value === lo)) {
      fail(name, value, "float", `must be ${strict ? ">" : ">="} ${floatRepr(lo)}`);
    }
  }

  function checkChoice(name, value, choices) {                     // validate.check_choice
    if (!choices.includes(value)) fail(name, value, "choice", `must be one of ${choices.map(strRepr).join(", ")}`);
  }

  // -- EnergyControls ------------------------------------------------------------------------------------------

  const specs = () => C().specs;
  const label = name => C().labels[name];                        // Controls.label
  const grid = name => {                                         // Controls.grid
    const [kind, allowed] = specs()[name];
    return kind === "float" && allowed.length > 2 ? allowed[2] : null;
  };

  // Controls.explain: "width d 7: must be ..." for "width=7 is invalid: must be ...".
  function explain(message) {
    const match = /^(\w+)=(.+?) is invalid: (.*)$/s.exec(message);
    if (match === null || !(match[1] in specs())) return message;
    return `${label(match[1])} ${match[2].replace(/^'+|'+$/g, "")}: ${match[3]}`;
  }

  // Controls.from_query: a link's texts as values (ints as BigInt until validated); the first unreadable one raises.
  function fromQuery(query) {
    const values = {};
    for (const [name, [kind]] of Object.entries(specs())) {
      const raw = query[name];
      if (raw === undefined) continue;
      let value;
      if (kind === "int") value = pyInt(raw);
      else if (kind === "float") value = pyFloat(raw);
      else if (kind === "bool") {
        const word = raw.toLowerCase();
        value = ["true", "false", "1", "0"].includes(word) ? ["true", "1"].includes(word) : null;
      } else value = raw;
      if (value === null) {
        fail(name, raw, "str", `cannot be read as ${kind === "int" || kind === "float" ? "a number" : "true/false"}`);
      }
      values[name] = value;
    }
    return construct(values);
  }

  // Controls.from_link: a number between its slider's steps is snapped to the nearest one, with a note.
  function fromLink(query) {
    query = {...query};
    const notes = [];
    for (const name of Object.keys(specs())) {
      const step = grid(name), raw = query[name];
      if (step === null || raw === undefined) continue;
      const value = pyFloat(raw);
      if (value === null || !Number.isFinite(value)) continue;    // from_query, or the validation, says why
      const lo = specs()[name][1][0];
      const snapped = Number((lo + roundHalfEven((value - lo) / step) * step).toFixed(10));   // round(..., 10)
      if (Math.abs(snapped - value) > 1e-9 * Math.max(1, Math.abs(value))) {
        query[name] = floatRepr(snapped);
        notes.push(`${label(name)} ${raw} lies between the slider's steps of ${formatG(step)}: showing ` +
                   `${formatG(snapped)}`);
      }
    }
    return {values: fromQuery(query), notes};
  }

  function roundHalfEven(x) {                                     // Python's round(x) of a float
    const down = Math.floor(x), rest = x - down;
    return rest > 0.5 || (rest === 0.5 && down % 2 !== 0) ? down + 1 : down;
  }

  // EnergyControls.from_values then its __post_init__: the switches' own validation (CEMOptions, every field in
  // its order, then the diagonal form), the page's ranges (Controls._validate, in specs order), the cost, and the
  // configs the layer builds (AttentionConfig's and BlockConfig's heads). Returns the values, ints as Numbers.
  function construct(given) {
    const values = {...C().defaults, ...given};
    for (const {name, kind, allowed, default: fallback} of C().switches) {     // CEMOptions.__post_init__
      const value = name in values ? values[name] : fallback;
      if (kind === "int") checkInt(name, value, allowed[0], allowed[1]);
      else if (kind === "float") checkFloat(name, value, allowed[0], allowed[1]);
      else checkChoice(name, value, allowed);
    }
    checkDiagonalForm(values.diagonal, values.diagonal_form);
    for (const [name, [kind, allowed]] of Object.entries(specs())) {            // Controls._validate
      const value = values[name];
      if (kind === "choice") checkChoice(name, value, allowed);
      else if (kind === "int") checkInt(name, value, allowed[0], allowed[1]);
      else if (kind === "float") {
        checkFloat(name, value, allowed[0], false);
        if (value > allowed[1]) {
          fail(name, value, "float", `must be in [${floatRepr(allowed[0])}, ${floatRepr(allowed[1])}]`);
        }
      }
    }
    for (const [name, [kind]] of Object.entries(specs())) if (kind === "int") values[name] = Number(values[name]);
    if (cost(values) > C().cost_limit) {
      fail("width", values.width, "int",
           `with sequence length ${values.seq_len}, steps T ${values.T}, heads ${values.heads} and diagonal ` +
           `${values.diagonal}, too large for an interactive page (seconds of CPU per change on a busy 2-core ` +
           "machine); lower the width, the sequence length or T");
    }
    if (values.layer !== "mlp") checkHeads(values.width, values.heads, values.rope);   // attention_config, block_config
    return values;
  }

  function checkDiagonalForm(diagonal, form) {                    // config.check_diagonal_form
    if (C().needs_diagonal.includes(form) && diagonal === "none") {
      const others = C().switches.find(s => s.name === "diagonal").allowed.filter(n => n !== "none");
      fail("diagonal_form", form, "choice", `needs a diagonal (diagonal=${others.map(strRepr).join(" or ")})`);
    }
  }

  function checkHeads(width, heads, rope) {                       // HeadsConfig.__post_init__ (d_model = width)
    if (width % heads) fail("d_model", width, "int", `must be divisible by n_heads=${heads}`);
    if (rope && (width / heads) % 2) {
      fail("n_heads", heads, "int", `rope=True needs an even head dimension; d_model/n_heads = ${width / heads}`);
    }
  }

  // DIAGONALS[name].core_width(d, H): the attention core's width per query (cem_core/nn/diagonals.py).
  const CORE_WIDTH = {none: (d, H) => d, per_head: (d, H) => d + H * d, shared: (d, H) => 2 * d};

  function cost(v) {                                              // EnergyControls.cost
    const n = v.seq_len, d = v.width, dff = 2 * d;                // d_ff = 2 d
    const widen = CORE_WIDTH[v.diagonal](d, v.heads) / d;
    let perStep = 0, perPoint = 0;
    if (v.layer !== "mlp") {
      perStep += 3 * n * n * d * widen + 4 * n * d * d;
      perPoint += n * d * widen + 2 * d * d;
    }
    if (v.layer !== "attention") {
      perStep += 4 * n * d * dff;
      perPoint += 2 * d * dff;
    }
    return (v.T + 1) * perStep + C().landscape_grid ** 2 * perPoint;
  }

  function headsOptions(width, rope) {                            // EnergyControls.heads_options
    const [lo, hi] = specs().heads[1], out = [];
    for (let h = lo; h <= hi; h++) if (width % h === 0 && !(rope && (width / h) % 2)) out.push(h);
    return out;
  }

  // EnergyControls.settle: options that make no sense together reset together, a sentence per surprise.
  function settle(given) {
    const values = {...given}, notes = [];
    if (values.diagonal === "none") values.diagonal_form = C().switches.find(s => s.name === "diagonal_form").default;
    if (values.rope && values.width % 2) {
      values.rope = false;
      notes.push("RoPE is off: it rotates pairs of coordinates, so it needs an even width d " +
                 `(not ${values.width}).`);
    }
    const options = headsOptions(values.width, values.rope);
    if (!options.includes(values.heads)) {
      const below = options.filter(h => h <= values.heads);
      const heads = below.length ? Math.max(...below) : options[0];
      notes.push(`heads ${values.heads} → ${heads}: the heads must divide the width d = ${values.width}` +
                 (values.rope ? " into even head widths (RoPE)" : "") +
                 `; this width allows ${options.join(", ")}.`);
      values.heads = heads;
    }
    return {values, notes};
  }

  function shown(layer, preconditioner, diagonal) {               // EnergyControls.shown
    const c = C();
    return Object.keys(specs()).filter(name =>
      !(layer === "mlp" && c.attention_only.includes(name)) && !(layer === "attention" && c.mlp_only.includes(name)) &&
      !(preconditioner === "none" && c.preconditioner_only.includes(name)) &&
      !(diagonal === "none" && c.diagonal_only.includes(name)));
  }

  function toQuery(values) {                                      // Controls.to_query
    return Object.fromEntries(Object.entries(specs()).map(([name, [kind]]) => [name, kind === "float" ?
      floatRepr(values[name]) : String(values[name])]));         // (a bool: "true", "false", as str(v).lower())
  }

  // app_pages/common.restore_controls: a link's controls, or the defaults with the message the app shows. Returns
  // {values, error, notes}: the error (or null) and the snapped values' notes.
  function restore(query) {
    try {
      const {values, notes} = fromLink(query);
      return {values, error: null, notes};
    } catch (err) {
      if (!(err instanceof ControlError)) throw err;
      return {values: {...C().defaults}, notes: [],
              error: `The link's settings could not be used: ${explain(err.message)}. Showing the defaults instead.`};
    }
  }

  globalThis.CEMControls = {ControlError, strRepr, pyInt, pyFloat, explain, fromQuery, fromLink, construct,
                            cost, headsOptions, settle, shown, toQuery, restore, label};
})();
