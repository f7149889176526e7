// Python's ways of writing a float, for the pages computed in the browser: format(x, ".pg") and str(x). explore.js
// (the notes), figures.js (hover texts and legends) and controls.js (the links' messages) write numbers with them,
// so that every text equals the one the Python core writes. A classic script: defines globalThis.CEMFormat.
"use strict";

(function () {
  // -- Python's number formats ----------------------------------------------------------------------------------

  // The p significant digits of x > 0 and the exponent of the first, rounded as Python rounds (the nearest, a tie to
  // even). toExponential rounds a tie up: a tie is a number whose exact decimal expansion ends in the 5 just past
  // the p digits, and toExponential(99) writes such a short expansion exactly.
  function digits(x, p) {
    const [mantissa, exponent] = x.toExponential(p - 1).split("e");
    const [exact, exactExponent] = x.toExponential(99).split("e");
    const long = exact.replace(".", "");
    if (long[p] === "5" && /^0*$/.test(long.slice(p + 1)) && Number(long[p - 1]) % 2 === 0) {
      return [long.slice(0, p), Number(exactExponent)];
    }
    return [mantissa.replace(".", ""), Number(exponent)];
  }

  function trimmed(text) {                          // "1.500" -> "1.5", "2.000" -> "2"
    return text.includes(".") ? text.replace(/0+$/, "").replace(/\.$/, "") : text;
  }

  function exponentForm(d, e) {                     // "1.5e+16", "1e-05"
    return `${trimmed(d[0] + "." + d.slice(1))}e${e < 0 ? "-" : "+"}${String(Math.abs(e)).padStart(2, "0")}`;
  }

  // mirrors Python's format(x, f".{precision}g"), the precision 6 when not given (format(x, "g"))
  function formatG(x, precision = 6) {
    if (Number.isNaN(x)) return "nan";
    const sign = x < 0 || Object.is(x, -0) ? "-" : "";
    x = Math.abs(x);
    if (x === Infinity) return `${sign}inf`;
    if (x === 0) return `${sign}0`;
    const p = Math.max(precision, 1);
    const [d, e] = digits(x, p);
    if (e < -4 || e >= p) return sign + exponentForm(d, e);
    return sign + trimmed(e >= 0 ? `${d.slice(0, e + 1)}.${d.slice(e + 1)}` : `0.${"0".repeat(-e - 1)}${d}`);
  }

  // mirrors Python's str(x) of a float: the shortest digits that read back as x (toExponential() finds them), in
  // fixed notation from 1e-4 up to 1e16, else in exponent form
  function floatRepr(x) {
    if (Number.isNaN(x)) return "nan";
    const sign = x < 0 || Object.is(x, -0) ? "-" : "";
    x = Math.abs(x);
    if (x === Infinity) return `${sign}inf`;
    if (x === 0) return `${sign}0.0`;
    const [mantissa, exponent] = x.toExponential().split("e");
    const d = mantissa.replace(".", ""), e = Number(exponent);
    if (e < -4 || e >= 16) return sign + exponentForm(d, e);
    if (e < 0) return `${sign}0.${"0".repeat(-e - 1)}${d}`;
    return `${sign}${d.slice(0, e + 1).padEnd(e + 1, "0")}.${d.slice(e + 1) || "0"}`;
  }

  globalThis.CEMFormat = {formatG, floatRepr};
})();
