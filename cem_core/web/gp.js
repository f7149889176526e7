/* A trained GP model read step by step in the browser: what cem_core.experiments.gp.inspect's `inspect_function`
 * computes, from the weights the site exports at build time (cem_core/ui/site_models.py, site-models.js).
 *
 * A classic script: <script src="gp.js"> (after explore.js, for the activations) defines globalThis.CEMGP =
 *   decode(b64, bytes)             little-endian float32 (4) or float64 (8) base64 as a Float64Array
 *   loadModel(entry)               a model of CEMSiteModels.models, its weights decoded
 *   posterior(task, cx, cy, grid)  {mean, sd} of f on the grid given the points (mirrors task.gp_posterior_on_grid)
 *   inspect(model, cx, cy, grid, T_test, truth)   mirrors inspect.inspect_function (its JSON, field for field)
 *   parsePoints(text, task)        mirrors inspect.parse_points: [[x, y], ...] or {error}
 *   formatPoints(points)           the inverse, as a link's in_points holds them
 *
 * The Python core is the reference: each function names the one it mirrors, and tests/test_web_gp.py holds every
 * readout to it. What inspect_function batches as G sequences (the K context points, then one grid point as the
 * query) is computed here as one shared context and G queries: attention is causal and the points' tokens come
 * first, so every sequence's first K tokens are the same, and each query attends to the K context tokens and to
 * itself. Shapes: K context tokens, G queries, d width, H heads of d_h = d / H, f = d_ff, T steps; arrays are
 * row-major Float64Array.
 */
(function (root) {
  "use strict";

  const ACTIVATIONS = root.CEMExplore.activations;

  function decode(b64, bytes) {
    const raw = atob(b64), buffer = new ArrayBuffer(raw.length), view = new Uint8Array(buffer);
    for (let k = 0; k < raw.length; k++) view[k] = raw.charCodeAt(k);
    return Float64Array.from(bytes === 8 ? new Float64Array(buffer) : new Float32Array(buffer));
  }

  // -- the task: mirrors cem_core/experiments/gp/task.py -------------------------------------------------------

  function kernel(task, a, b) {                          // mirrors task.kernel_matrix (rbf): s^2 exp(-r^2 / 2 l^2)
    const out = new Float64Array(a.length * b.length), ell = task.lengthscale, s2 = task.signal_var;
    for (let i = 0; i < a.length; i++) {
      for (let j = 0; j < b.length; j++) {
        const r = Math.abs(a[i] - b[j]) / ell;
        out[i * b.length + j] = s2 * Math.exp(-0.5 * r * r);
      }
    }
    return out;
  }

  function cholesky(C, n) {                               // C = L L^T, L lower (torch.linalg.cholesky)
    const L = new Float64Array(n * n);
    for (let i = 0; i < n; i++) {
      for (let j = 0; j <= i; j++) {
        let s = C[i * n + j];
        for (let k = 0; k < j; k++) s -= L[i * n + k] * L[j * n + k];
        L[i * n + j] = i === j ? Math.sqrt(s) : s / L[j * n + j];
      }
    }
    return L;
  }

  function forward(L, n, B, cols) {                       // L^-1 B for B (n, cols): forward substitution
    const out = Float64Array.from(B);
    for (let c = 0; c < cols; c++) {
      for (let i = 0; i < n; i++) {
        let s = out[i * cols + c];
        for (let k = 0; k < i; k++) s -= L[i * n + k] * out[k * cols + c];
        out[i * cols + c] = s / L[i * n + i];
      }
    }
    return out;
  }

  function backward(L, n, b) {                            // L^-T b: back substitution
    const out = Float64Array.from(b);
    for (let i = n - 1; i >= 0; i--) {
      let s = out[i];
      for (let k = i + 1; k < n; k++) s -= L[k * n + i] * out[k];
      out[i] = s / L[i * n + i];
    }
    return out;
  }

  function posterior(task, cx, cy, grid) {
    // mirrors task.gp_posterior_on_grid: mean = k_*^T (K + sigma^2 I)^-1 y, var = k(x_*, x_*) - k_*^T (K + s^2 I)^-1 k_*
    const K = cx.length, G = grid.length, mean = new Float64Array(G), sd = new Float64Array(G);
    if (K === 0) {
      sd.fill(Math.sqrt(task.signal_var));
      return {mean, sd};
    }
    const C = kernel(task, cx, cx);
    for (let i = 0; i < K; i++) C[i * K + i] += task.noise_var;
    const L = cholesky(C, K), Ks = kernel(task, cx, grid);             // k(x_ctx, x_*): (K, G)
    const alpha = backward(L, K, forward(L, K, cy, 1));                // (K + sigma^2 I)^-1 y
    const v = forward(L, K, Ks, G);                                    // L^-1 k_*: (K, G)
    for (let g = 0; g < G; g++) {
      let m = 0, vv = 0;
      for (let i = 0; i < K; i++) {
        m += Ks[i * G + g] * alpha[i];
        vv += v[i * G + g] * v[i * G + g];
      }
      mean[g] = m;
      sd[g] = Math.sqrt(Math.max(task.signal_var - vv, 0));
    }
    return {mean, sd};
  }

  // -- the model's pieces: mirrors cem_core/experiments/gp/model.py and cem_core/nn ------------------------------

  function weight(w) {
    return {rows: w.shape[0], cols: w.shape[1], data: decode(w.data, 4)};
  }

  function loadModel(entry) {
    // one model of CEMSiteModels.models: its layers' weights decoded, in the order they run (GPTransformer.sublayers)
    const layers = entry.layers.map((l) => {
      const layer = {kind: l.kind, name: l.name, norm: decode(l.norm, 4), eps: l.eps, T: l.T, eta: l.eta,
                     heads: l.heads, beta: l.beta, activation: l.activation ? ACTIVATIONS[l.activation] : null};
      for (const key of ["q", "k", "v", "o", "gate", "up", "down"]) if (l[key]) layer[key] = weight(l[key]);
      if (l.kind.startsWith("cem")) layer.qT = transpose(layer.q);       // the readout W_Q^T (O = W_Q^T)
      if (l.kind === "cem-block") layer.upT = transpose(layer.up);       // the tied down projection U^T
      return layer;
    });
    return {name: entry.name, title: entry.title, trained_T: entry.trained_T, most_T: entry.most_T, task: entry.task,
            d: entry.in_proj.shape[0], in_proj: weight(entry.in_proj), in_bias: decode(entry.in_proj.bias, 4),
            layers, norm: decode(entry.norm, 4), eps: entry.eps, head: weight(entry.head),
            head_bias: decode(entry.head.bias, 4)[0]};
  }

  function linear(X, rows, W, bias) {
    // nn.Linear on each row: X W^T (+ b), (rows, W.rows); two rows by two outputs at a time (each load serves two
    // multiply-adds, what bounds this loop in JavaScript, as explore.js's matmul)
    const {rows: out, cols: inner, data} = W, Y = new Float64Array(rows * out);
    for (let i = 0; i < rows; i += 2) {
      const two = i + 1 < rows, a0 = i * inner, a1 = two ? a0 + inner : a0;
      for (let o = 0; o < out; o += 2) {
        const pair = o + 1 < out, b0 = o * inner, b1 = pair ? b0 + inner : b0;
        let s00 = 0, s01 = 0, s10 = 0, s11 = 0;
        for (let m = 0; m < inner; m++) {
          const x0 = X[a0 + m], x1 = X[a1 + m], w0 = data[b0 + m], w1 = data[b1 + m];
          s00 += x0 * w0;
          s01 += x0 * w1;
          s10 += x1 * w0;
          s11 += x1 * w1;
        }
        const c0 = bias ? bias[o] : 0, c1 = bias && pair ? bias[o + 1] : 0;
        Y[i * out + o] = s00 + c0;
        if (pair) Y[i * out + o + 1] = s01 + c1;
        if (two) {
          Y[(i + 1) * out + o] = s10 + c0;
          if (pair) Y[(i + 1) * out + o + 1] = s11 + c1;
        }
      }
    }
    return Y;
  }

  function transpose(W) {                                 // W^T as a Linear's weight: Z W = linear(Z, W^T)
    const {rows, cols, data} = W, out = new Float64Array(rows * cols);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) out[c * rows + r] = data[r * cols + c];
    return {rows: cols, cols: rows, data: out};
  }

  function rmsNorm(H, rows, d, w, eps) {                  // nn.RMSNorm: h / sqrt(mean(h^2) + eps) * weight
    const out = new Float64Array(rows * d);
    for (let i = 0; i < rows; i++) {
      let ss = 0;
      for (let m = 0; m < d; m++) ss += H[i * d + m] * H[i * d + m];
      const inv = 1 / Math.sqrt(ss / d + eps);
      for (let m = 0; m < d; m++) out[i * d + m] = H[i * d + m] * inv * w[m];
    }
    return out;
  }

  function tokens(cx, cy, grid) {
    // mirrors model.make_tokens ("pairs"): token j = [x_j, x_{j-1}, y_{j-1}, 1{j = 0}]; the K context tokens, then
    // the query token of each grid point [x_*, x_{K-1}, y_{K-1}, 1{K = 0}]
    const K = cx.length, G = grid.length, ctx = new Float64Array(K * 4), q = new Float64Array(G * 4);
    for (let j = 0; j < K; j++) ctx.set([cx[j], j ? cx[j - 1] : 0, j ? cy[j - 1] : 0, j ? 0 : 1], 4 * j);
    for (let g = 0; g < G; g++) q.set([grid[g], K ? cx[K - 1] : 0, K ? cy[K - 1] : 0, K ? 0 : 1], 4 * g);
    return {ctx, q};
  }

  // -- attention over a shared context: context token i attends to j <= i, a query to the K tokens and itself ------

  function attend(layer, d, Qc, Qq, Kc, Kq, Vc, Vq, K, G, need) {
    // mirrors attention.causal_attention per head k: a^k_ij = softmax_j(beta q_i . k_j), o_i = sum_j a^k_ij v_j,
    // -(1/beta) LSE_j(beta q_i . k_j) per token (the interaction energy's term) beside it; the weights when `need`
    const H = layer.heads, dh = d / H, beta = layer.beta;
    const Oc = new Float64Array(K * d), Oq = new Float64Array(G * d), ec = new Float64Array(K), eq = new Float64Array(G);
    const wc = need ? new Float64Array(H * K * K) : null, wq = need ? new Float64Array(G * H * (K + 1)) : null;
    const s = new Float64Array(K + 1);
    const row = (Q, qi, E, ei, O, W, wOff, own, V, vi) => {   // one token: keys 0..n-1 of the context, then its own
      for (let h = 0; h < H; h++) {
        const o = h * dh, n = own ? K : qi + 1;
        let max = -Infinity;
        for (let j = 0; j < n; j++) {
          let z = 0;
          for (let m = 0; m < dh; m++) z += Q[qi * d + o + m] * Kc[j * d + o + m];
          s[j] = beta * z;
          if (s[j] > max) max = s[j];
        }
        if (own) {
          let z = 0;
          for (let m = 0; m < dh; m++) z += Q[qi * d + o + m] * Kq[vi * d + o + m];
          s[K] = beta * z;
          if (s[K] > max) max = s[K];
        }
        const last = own ? K + 1 : n;
        let Z = 0;
        for (let j = 0; j < last; j++) {
          s[j] = Math.exp(s[j] - max);
          Z += s[j];
        }
        E[ei] += -(max + Math.log(Z)) / beta;
        for (let j = 0; j < last; j++) {
          const a = s[j] / Z, v = own && j === K ? Vq : Vc, vr = own && j === K ? vi : j;
          if (W) W[wOff + h * (own ? K + 1 : K * K) + (own ? j : qi * K + j)] = a;
          for (let m = 0; m < dh; m++) O[qi * d + o + m] += a * v[vr * d + o + m];
        }
      }
    };
    for (let i = 0; i < K; i++) row(Qc, i, ec, i, Oc, wc, 0, false, null, 0);
    for (let g = 0; g < G; g++) row(Qq, g, eq, g, Oq, wq, g * H * (K + 1), true, null, g);
    return {Oc, Oq, ec, eq, wc, wq};
  }

  // -- the sublayers: mirrors baselines.LlamaAttention, baselines.SwiGLU and descent.EnergyDescentLayer ----------

  function llamaAttention(layer, state) {                 // mirrors LlamaAttention.forward: h + W_O MHA(Norm h)
    const {K, G, d} = state, cc = rmsNorm(state.ctx, K, d, layer.norm, layer.eps);
    const cq = rmsNorm(state.q, G, d, layer.norm, layer.eps);
    const a = attend(layer, d, linear(cc, K, layer.q), linear(cq, G, layer.q), linear(cc, K, layer.k),
                     linear(cq, G, layer.k), linear(cc, K, layer.v), linear(cq, G, layer.v), K, G, false);
    return residual(state, linear(a.Oc, K, layer.o), linear(a.Oq, G, layer.o));
  }

  function swiglu(layer, state) {                         // mirrors SwiGLU.forward: h + W_down (phi(W_gate c) * W_up c)
    const {K, G, d} = state, phi = layer.activation.phi;
    const mlp = (H, rows) => {
      const c = rmsNorm(H, rows, d, layer.norm, layer.eps), z = linear(c, rows, layer.gate), up = linear(c, rows, layer.up);
      for (let m = 0; m < z.length; m++) z[m] = phi(z[m]) * up[m];
      return linear(z, rows, layer.down);
    };
    return residual(state, mlp(state.ctx, K), mlp(state.q, G));
  }

  function residual(state, dc, dq) {
    const ctx = Float64Array.from(state.ctx), q = Float64Array.from(state.q);
    for (let m = 0; m < ctx.length; m++) ctx[m] += dc[m];
    for (let m = 0; m < q.length; m++) q[m] += dq[m];
    return {...state, ctx, q};
  }

  function negativeGradient(layer, ctx, xc, xq, need, watch) {
    // mirrors InteractionTerm._interaction_gradient (+ ElementwiseTerm._elementwise_gradient in the block):
    //   -grad E_att = sum_k W_Q,k^T sum_j a^k_ij W_K,k c_j (values tied to the keys, the readout to W_Q),
    //   -grad E_mlp = U^T (phi(U x) * G c); with each token's energy E_att = -sum_k (1/beta) LSE_j(beta s^k_ij)
    //   and E_mlp = -sum_m (G c)_m Phi((U x)_m) (energy.attention_energy, energy.mlp_energy), E_mlp at the context
    //   tokens and at query `watch` only (the others' energies are not read)
    const {K, G, d} = ctx;
    const a = attend(layer, d, linear(xc, K, layer.q), linear(xq, G, layer.q), ctx.kc, ctx.kq, ctx.kc, ctx.kq, K, G, need);
    const uc = linear(a.Oc, K, layer.qT), uq = linear(a.Oq, G, layer.qT);
    if (layer.kind === "cem-block") {
      const {phi, Phi} = layer.activation;
      for (const [x, rows, gate, u, e, only] of [[xc, K, ctx.gc, uc, a.ec, -1], [xq, G, ctx.gq, uq, a.eq, watch]]) {
        const z = linear(x, rows, layer.up), f = layer.up.rows;
        for (let i = 0; i < rows; i++) {
          const energy = only < 0 || i === only;          // E_mlp only where it is read: Phi costs a series
          for (let m = i * f; m < (i + 1) * f; m++) {
            if (energy) e[i] -= gate[m] * Phi(z[m]);
            z[m] = phi(z[m]) * gate[m];
          }
        }
        const back = linear(z, rows, layer.upT);
        for (let m = 0; m < u.length; m++) u[m] += back[m];
      }
    }
    return {uc, uq, ec: a.ec, eq: a.eq, wc: a.wc, wq: a.wq};
  }

  function trace(layer, state, T, watch) {
    // mirrors EnergyDescentLayer.trace: x^(0) = c = Norm(h), x^(t+1) = x^(t) + eta (-grad E(x^(t) | c)), the fixed
    // context (the keys W_K c, the gate G c) once for all T steps; each token's energy at every t, the attention
    // weights of every step for the context tokens and for query `watch`
    const {K, G, d} = state, eta = layer.eta;
    const cc = rmsNorm(state.ctx, K, d, layer.norm, layer.eps), cq = rmsNorm(state.q, G, d, layer.norm, layer.eps);
    const ctx = {K, G, d, kc: linear(cc, K, layer.k), kq: linear(cq, G, layer.k)};
    if (layer.kind === "cem-block") {
      ctx.gc = linear(cc, K, layer.gate);
      ctx.gq = linear(cq, G, layer.gate);
    }
    const xs = [{ctx: cc, q: cq}], energies = [], weights = [];
    for (let t = 0; t <= T; t++) {
      const x = xs[t], r = negativeGradient(layer, ctx, x.ctx, x.q, t < T, watch);
      energies.push({ctx: r.ec, q: r.eq});
      if (t === T) break;
      weights.push({ctx: r.wc, q: r.wq.subarray(watch * layer.heads * (K + 1), (watch + 1) * layer.heads * (K + 1))});
      const next = {ctx: Float64Array.from(x.ctx), q: Float64Array.from(x.q)};
      for (let m = 0; m < next.ctx.length; m++) next.ctx[m] += eta * r.uc[m];
      for (let m = 0; m < next.q.length; m++) next.q[m] += eta * r.uq[m];
      xs.push(next);
    }
    return {iterates: xs, energies, weights, step_sizes: Array(T).fill(eta)};
  }

  function stopped(state, tr, t) {                        // h + x^(t) - x^(0) (readout._layer_steps)
    const x = tr.iterates[t], x0 = tr.iterates[0], ctx = Float64Array.from(state.ctx), q = Float64Array.from(state.q);
    for (let m = 0; m < ctx.length; m++) ctx[m] += x.ctx[m] - x0.ctx[m];
    for (let m = 0; m < q.length; m++) q[m] += x.q[m] - x0.q[m];
    return {...state, ctx, q};
  }

  function run(layer, state) {                            // one sublayer as trained: h -> h'
    if (layer.kind === "llama-attention") return llamaAttention(layer, state);
    if (layer.kind === "swiglu") return swiglu(layer, state);
    const tr = trace(layer, state, layer.T, 0);
    return stopped(state, tr, layer.T);
  }

  function readOut(model, state) {                        // mirrors GPTransformer.read_out at the queries: (G,)
    const c = rmsNorm(state.q, state.G, model.d, model.norm, model.eps);
    return linear(c, state.G, model.head, [model.head_bias]);
  }

  function rmse(a, b) {                                   // mirrors inspect._rmse
    let s = 0;
    for (let k = 0; k < a.length; k++) s += (a[k] - b[k]) ** 2;
    return Math.sqrt(s / a.length);
  }

  function inspect(model, cx, cy, grid, T_test, truth) {
    // mirrors inspect.inspect_function (with the context given): the posterior, and per CEM layer (read_steps) the
    // prediction after every step t = 0 .. T_test, its RMSEs, and the energies, update norms and attention of the
    // sequence of the middle grid point
    const K = cx.length, G = grid.length, d = model.d, middle = Math.floor(G / 2), T = T_test || model.trained_T;
    const {mean, sd} = posterior(model.task, cx, cy, grid), tok = tokens(cx, cy, grid);
    let state = {K, G, d, ctx: linear(tok.ctx, K, model.in_proj, model.in_bias),
                 q: linear(tok.q, G, model.in_proj, model.in_bias)};
    const layers = [];
    model.layers.forEach((layer, index) => {
      if (layer.kind.startsWith("cem")) {
        const tr = trace(layer, state, T, middle), prediction = [], later = model.layers.slice(index + 1);
        const tokenwise = later.every((l) => l.kind === "swiglu");     // then only the queries reach the head
        for (let t = 0; t <= T; t++) {
          let s = stopped(state, tr, t);
          if (tokenwise) s = {...s, K: 0, ctx: new Float64Array(0)};
          for (const l of later) s = run(l, s);
          prediction.push(Array.from(readOut(model, s)));
        }
        layers.push(layerReading(layer, tr, prediction, mean, truth, middle, K, T, d));
      }
      state = run(layer, state);
    });
    const final = Array.from(readOut(model, state));
    return {context: K, trained_T: model.trained_T, T_test: T, context_x: Array.from(cx), context_y: Array.from(cy),
            grid: Array.from(grid), truth: truth ? Array.from(truth) : null, posterior_mean: Array.from(mean),
            posterior_sd: Array.from(sd), shown_query: middle, prediction: final, rmse_to_posterior: rmse(final, mean),
            rmse_to_truth: truth ? rmse(final, truth) : null, layers};
  }

  function layerReading(layer, tr, prediction, mean, truth, middle, K, T, d) {
    // mirrors inspect._layer_reading: the middle sequence's tokens are the K context tokens and its query
    const token = (x, k) => (k < K ? x.ctx.subarray(k * d, (k + 1) * d) : x.q.subarray(middle * d, (middle + 1) * d));
    const energies = tr.energies.map((e) => [...Array.from(e.ctx), e.q[middle]]);
    const norms = [];
    for (let t = 1; t <= T; t++) {
      const row = [];
      for (let k = 0; k <= K; k++) {
        const a = token(tr.iterates[t], k), b = token(tr.iterates[t - 1], k);
        let s = 0;
        for (let m = 0; m < d; m++) s += (a[m] - b[m]) ** 2;
        row.push(Math.sqrt(s));
      }
      norms.push(row);
    }
    const H = layer.heads, round = (v) => Math.round(v * 1e5) / 1e5;
    const attention = tr.weights.map((w) => Array.from({length: H}, (_, h) => Array.from({length: K + 1}, (_, i) =>
      Array.from({length: K + 1}, (_, j) => round(i < K ? (j <= i ? w.ctx[h * K * K + i * K + j] : 0)
                                                       : w.q[h * (K + 1) + j])))));
    return {name: layer.name, trained_T: layer.T, T, prediction,
            rmse_to_posterior: prediction.map((p) => rmse(p, mean)),
            rmse_to_truth: truth ? prediction.map((p) => rmse(p, truth)) : null,
            energies, update_norms: norms, step_sizes: tr.step_sizes, attention};
  }

  // -- a learner's own points: mirrors inspect.parse_points ----------------------------------------------------------

  function repr(text) {                                   // Python's repr of a str (its quotes, its escapes of \ and ')
    if (text.includes("'") && !text.includes('"')) return `"${text.replace(/\\/g, "\\\\")}"`;
    return `'${text.replace(/\\/g, "\\\\").replace(/'/g, "\\'")}'`;
  }

  function parsePoints(text, task) {
    const [low, high] = task.box, limit = task.n_points - 1, g = (v) => root.CEMFormat.formatG(v, 6);
    const items = text.trim() ? text.split(",").filter((item) => item.trim()) : [];
    if (items.length > limit) {
      return {error: `points=${repr(text)} is invalid: ${items.length} points, and the model reads at most ` +
                     `${limit} (its ${task.n_points} tokens less the query)`};
    }
    const out = [];
    for (const item of items) {
      const parts = item.split(":"), num = (v) => (/^\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*$/.test(v) ? +v : NaN);
      const [x, y] = parts.length === 2 ? parts.map(num) : [NaN, NaN];
      if (!(Number.isFinite(x) && Number.isFinite(y))) {
        return {error: `points=${repr(text)} is invalid: ${repr(item.trim())} is not a point x:y ` +
                       "of two numbers"};
      }
      if (!(low <= x && x <= high)) {
        return {error: `points=${repr(text)} is invalid: x = ${g(x)} of ${repr(item.trim())} is ` +
                       `outside the box [${g(low)}, ${g(high)}]`};
      }
      out.push([x, y]);
    }
    return {points: out};
  }

  function formatPoints(points) {                         // "x1:y1,x2:y2": three decimals, as a link carries them
    return points.map(([x, y]) => `${+x.toFixed(3)}:${+y.toFixed(3)}`).join(",");
  }

  root.CEMGP = {decode, loadModel, posterior, inspect, parsePoints, formatPoints, rmse};
})(globalThis);
