/* The energy page's computation in the browser: what cem_core.ui.explore's `explore` and `diagnose` compute,
 * from the controls alone (the flat values of EnergyControls(...).values()).
 *
 * A classic script (no modules, no build step): <script src="explore.js"> defines globalThis.CEMExplore =
 *   seeded                        the counter-based generator of cem_core/ui/seeded.py (bits, uniforms, normals)
 *   explore(controls, token?)     {token, phases: [{name, energies, update_norms, radius, path, weights, landscape,
 *                                  rose, eigenvalues}]}, each array {shape, data: Float64Array} (rose: Uint8Array)
 *   diagnose(controls, data)      per phase what explore.Diagnosis holds, its text character for character
 *   plain(x)                      a result with its arrays as nested plain arrays (tests, JSON)
 *   erf(x)                        the error function (GELU's Phi)
 *
 * The Python core is the reference: each equation below names the Python function it mirrors. Shapes follow
 * Python's with the batch dropped: n tokens, d width, H heads of d_h = d / H, f = d_ff = 2 d, T steps. Arrays
 * are row-major Float64Array; the hot loops index them directly. The notes write numbers with pyformat.js
 * (CEMFormat, Python's format), loaded before them.
 */
(function (root) {
  "use strict";

  // -- seeded: mirrors cem_core/ui/seeded.py in uint32 arithmetic (Math.imul, >>> 0) ----------------------------

  const STREAMS = {"h": 0, "W_Q": 1, "W_K": 2, "diag": 3, "P_att.U": 4, "P_att.V": 5, "U_mlp": 6, "G_mlp": 7,
                   "P_mlp.U": 8, "P_mlp.V": 9};

  function fmix32(h) {                                    // mirrors seeded.fmix32: murmur3's 32-bit finalizer
    h = (h ^ (h >>> 16)) >>> 0;
    h = Math.imul(h, 0x85EBCA6B) >>> 0;
    h = (h ^ (h >>> 13)) >>> 0;
    h = Math.imul(h, 0xC2B2AE35) >>> 0;
    return (h ^ (h >>> 16)) >>> 0;
  }

  function start(seed, stream) {                          // mirrors seeded.start: fmix32(fmix32(seed) ^ (s+1) 9E3779B9)
    return fmix32((fmix32(seed >>> 0) ^ Math.imul(stream + 1, 0x9E3779B9)) >>> 0);
  }

  function bits(seed, stream, count) {                    // mirrors seeded.bits: mulberry32 of start + (k+1) 6D2B79F5
    const s = start(seed, stream), out = new Uint32Array(count);
    for (let k = 0; k < count; k++) {
      const a = (s + Math.imul(k + 1, 0x6D2B79F5)) >>> 0;
      let t = Math.imul(a ^ (a >>> 15), a | 1) >>> 0;
      t = (((t + Math.imul(t ^ (t >>> 7), t | 61)) >>> 0) ^ t) >>> 0;
      out[k] = (t ^ (t >>> 14)) >>> 0;
    }
    return out;
  }

  function uniforms(seed, stream, count) {               // mirrors seeded.uniforms: u_k = (bits_k + 1/2) / 2^32
    const b = bits(seed, stream, count), out = new Float64Array(count);
    for (let k = 0; k < count; k++) out[k] = (b[k] + 0.5) / 4294967296;
    return out;
  }

  const LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;   // seeded.LN2_HI, LN2_LO
  const LG = [6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01,
              2.222219843214978396e-01, 1.818357216161805012e-01, 1.531383769920937332e-01,
              1.479819860511658591e-01];                                             // seeded.LG
  const COS_C = [4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
                 -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11];
  const SIN_S = [-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
                 2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10];
  const SQRT_HALF = 0.7071067811865476, TWO_PI_HI = 6.283185005187988, TWO_PI_LO = 3.019915981956753e-07;
  const F64 = new Float64Array(1), U32 = new Uint32Array(F64.buffer);             // a double's two words

  function boxMullerLog(u) {                             // mirrors seeded.box_muller_log: fdlibm's log, same order
    F64[0] = u;
    const high = U32[1];
    let k = ((high >>> 20) & 0x7ff) - 1022;              // np.frexp: u = m 2^k, m in [1/2, 1)
    U32[1] = (high & 0x800fffff) | (1022 << 20);
    let m = F64[0];
    if (m < SQRT_HALF) { m = 2.0 * m; k = k - 1; }
    const f = m - 1.0, hfsq = 0.5 * f * f, s = f / (2.0 + f), z = s * s, w = z * z;
    const R = z * (LG[0] + w * (LG[2] + w * (LG[4] + w * LG[6]))) + w * (LG[1] + w * (LG[3] + w * LG[5]));
    return k * LN2_HI - ((hfsq - (s * (hfsq + R) + k * LN2_LO)) - f);
  }

  function cosTurns(u) {                                 // mirrors seeded.cos_turns: cos(2 pi u) by quarter turns
    const q = Math.floor(4.0 * u + 0.5), r = u - 0.25 * q, high = TWO_PI_HI * r, low = TWO_PI_LO * r;
    const a = high + low, y = low - (a - high), z = a * a, w = z * z;
    const c = z * (COS_C[0] + z * (COS_C[1] + z * COS_C[2])) + w * w * (COS_C[3] + z * (COS_C[4] + z * COS_C[5]));
    const hz = 0.5 * z, one = 1.0 - hz, cos = one + (((1.0 - one) - hz) + (z * c - a * y));
    const s = SIN_S[1] + z * (SIN_S[2] + z * SIN_S[3]) + z * w * (SIN_S[4] + z * SIN_S[5]), v = z * a;
    const sin = a - ((z * (0.5 * y - v * s) - y) - v * SIN_S[0]), turn = q % 4;
    return turn === 0 ? cos : turn === 1 ? -sin : turn === 2 ? -cos : sin;
  }

  function normals(seed, stream, count) {                // mirrors seeded.normals: sqrt(-2 log u_2k) cos(2 pi u_2k+1)
    const u = uniforms(seed, stream, 2 * count), out = new Float64Array(count);
    for (let k = 0; k < count; k++) out[k] = Math.sqrt(-2.0 * boxMullerLog(u[2 * k])) * cosTurns(u[2 * k + 1]);
    return out;
  }

  function linear(seed, name, rows, cols) {              // mirrors seeded.linear: (2u - 1) / sqrt(in), shape (out, in)
    const u = uniforms(seed, STREAMS[name], rows * cols), root = Math.sqrt(cols);
    for (let k = 0; k < u.length; k++) u[k] = (2.0 * u[k] - 1.0) / root;
    return u;
  }

  const seeded = {STREAMS, fmix32, start, bits, uniforms, boxMullerLog, cosTurns, normals, linear,
                  normal: (seed, name, count) => normals(seed, STREAMS[name], count)};   // mirrors seeded.normal

  // -- scalar functions ------------------------------------------------------------------------------------------

  function dot(a, ao, b, bo, len) {                     // sum_m a[ao + m] b[bo + m]
    let acc = 0;
    for (let m = 0; m < len; m++) acc += a[ao + m] * b[bo + m];
    return acc;
  }

  function softplus(x) {                                  // torch's softplus (beta 1, threshold 20)
    return x > 20 ? x : Math.log1p(Math.exp(x));
  }

  const TWO_OVER_SQRT_PI = 2 / Math.sqrt(Math.PI);
  const TWO_OVER_ODD = Float64Array.from({length: 100}, (_, n) => 2 / (2 * n + 1));   // 2 / (2n + 1)

  function erf(x) {
    // erf(x) = 2/sqrt(pi) x e^{-x^2} sum_n (2x^2)^n / (1 3 5 ... (2n+1)) below 2.5 (positive terms, no
    // cancellation), 1 - erfc(x) with erfc's continued fraction e^{-x^2}/sqrt(pi) / (x + (1/2)/(x + 1/(x + ...)))
    // up to 6, and 1 beyond (erfc(6) < 2.2e-17): 1.0e-15 relative of math.erf at worst where
    // tests/test_web_explore.py measures it (it asserts 1e-14).
    if (Number.isNaN(x)) return x;
    const ax = Math.abs(x);
    let r;
    if (ax < 2.5) {
      const x2 = ax * ax;
      let term = 1, sum = 1;
      for (let n = 1; term > 1e-17 * sum; n++) {
        term *= x2 * TWO_OVER_ODD[n];
        sum += term;
      }
      r = TWO_OVER_SQRT_PI * ax * Math.exp(-x2) * sum;
    } else if (ax < 6) {
      let f = ax, C = ax, D = 0;                          // modified Lentz: b_n = x, a_n = n / 2
      for (let n = 1; n < 500; n++) {
        const a = 0.5 * n;
        D = 1 / (ax + a * D);
        C = ax + a / C;
        const delta = C * D;
        f *= delta;
        if (Math.abs(delta - 1) < 1e-17) break;
      }
      r = 1 - Math.exp(-ax * ax) / (Math.sqrt(Math.PI) * f);
    } else {
      r = 1;
    }
    return x < 0 ? -r : r;
  }

  // Li2(w) = sum_n B_n y^(n+1) / (n+1)!: activations._LI2_COEFFS, B_n / (n+1)! for n = 0..24 (B_1 = -1/2)
  const LI2 = [1.0, -0.25, 0.027777777777777776, 0.0, -0.0002777777777777778, 0.0, 4.72411186696901e-06, 0.0,
               -9.185773074661964e-08, 0.0, 1.8978869988971e-09, 0.0, -4.0647616451442256e-11, 0.0,
               8.921691020456452e-13, 0.0, -1.9939295860721074e-14, 0.0, 4.518980029619918e-16, 0.0,
               -1.0356517612181247e-17, 0.0, 2.395218621026187e-19, 0.0, -5.581785874325009e-21];
  const PI2_6 = Math.PI ** 2 / 6;
  const SQRT2 = Math.sqrt(2), SQRT_2PI = Math.sqrt(2 * Math.PI), SQRT1_2 = Math.SQRT1_2;

  function siluPhi(z) {
    // mirrors activations.silu_antiderivative_value: Phi(z) = z softplus(z) + Li2(-e^z), through
    // dilog_neg_exp (Landen's identity, the Bernoulli series in y = softplus(-|z|)) and the inversion for z > 0
    const a = -Math.abs(z), y = Math.log1p(Math.exp(a));
    let series = 0;
    for (let k = LI2.length - 1; k >= 0; k--) series = (series + LI2[k]) * y;
    const li = -series - 0.5 * y * y;                     // Li2(-e^a) = -Li2(w) - y^2/2
    return z > 0 ? 0.5 * z * z + z * y - PI2_6 - li : z * y + li;
  }

  const ACTIVATIONS = {                                   // mirrors activations.ACTIVATIONS: phi and Phi (Phi' = phi)
    silu: {phi: (z) => z / (1 + Math.exp(-z)), Phi: siluPhi},                    // z sigma(z)
    gelu: {phi: (z) => z * 0.5 * (1 + erf(z * SQRT1_2)),                         // z N(z), exact (erf)
           Phi: (z) => 0.5 * ((z * z - 1) * (0.5 * (1 + erf(z / SQRT2))) + z * (Math.exp(-0.5 * z * z) / SQRT_2PI))},
    relu: {phi: (z) => (z > 0 ? z : 0), Phi: (z) => (z > 0 ? 0.5 * z * z : 0)},  // max(0, z), max(0, z)^2 / 2
  };

  // -- the controls' configs: mirrors controls.EnergyControls -----------------------------------------------------

  const LANDSCAPE_GRID = 41;                              // controls.LANDSCAPE_GRID
  const NORM_EPS = 1e-6, ROPE_BASE = 10000.0;             // config.SublayerConfig.norm_eps, HeadsConfig.rope_base
  const P_START = Math.fround(Math.log(Math.E - 1.0));    // precondition._SOFTPLUS_INV_ONE, a float32 parameter

  function followed(c) {                                  // mirrors EnergyControls.followed
    return Math.min(c.token, c.seq_len - 1);
  }

  function configOf(c) {
    // mirrors EnergyControls.attention_config / mlp_config / block_config: d_ff = 2 d, rank = min(rank, d)
    const d = c.width, H = c.heads;
    return {d, H, dh: d / H, n: c.seq_len, f: 2 * d, T: c.T, eta: c.eta, anchor: c.anchor, seed: c.seed,
            diagonal: c.diagonal, distance: c.diagonal_form === "distance", preconditioner: c.preconditioner,
            rank: Math.min(c.rank, d), p_scale: c.p_scale, rope: c.rope, activation: ACTIVATIONS[c.activation],
            phases: {attention: ["attention"], mlp: ["mlp"], block: ["attention", "mlp"], joint: ["joint"]}[c.layer]};
  }

  // -- the layers and their seeded weights: mirrors explore.build_layers / _seed_weights --------------------------

  function ropeTables(n, dh) {
    // mirrors rope.rope_angles: theta_{i,m} = i base^(-2m/d_h), cos and sin (n, d_h/2) (they repeat over the halves)
    const half = dh / 2, cos = new Float64Array(n * half), sin = new Float64Array(n * half);
    for (let m = 0; m < half; m++) {
      const inv = 1.0 / Math.pow(ROPE_BASE, (2 * m) / dh);
      for (let i = 0; i < n; i++) {
        cos[i * half + m] = Math.cos(i * inv);
        sin[i * half + m] = Math.sin(i * inv);
      }
    }
    return {cos, sin, half};
  }

  function turn(v, off, rope, pos, sign) {
    // mirrors rope._turn in place on v[off .. off + d_h): R_i v (sign 1, ``rotate``) or R_i^T v (-1, ``unrotate``)
    const half = rope.half, cos = rope.cos, sin = rope.sin, base = pos * half;
    for (let m = 0; m < half; m++) {
      const c = cos[base + m], s = sign * sin[base + m], v1 = v[off + m], v2 = v[off + half + m];
      v[off + m] = v1 * c - v2 * s;                      // v_m cos - sign v_{m+d/2} sin
      v[off + half + m] = v2 * c + v1 * s;               // v_{m+d/2} cos + sign v_m sin
    }
  }

  function buildLayer(cfg, name) {
    // one phase's layer: "attention" (CEMAttention), "mlp" (CEMGatedMLP) or "joint" (CEMBlock), float64
    const {d, H, f, seed} = cfg, layer = {name, att: null, mlp: null};
    if (name !== "mlp") {
      const rows = {none: 0, per_head: H, shared: 1}[cfg.diagonal];   // diagonals.DIAGONALS[...].rows(H)
      let diag = null;
      if (rows) {
        const mean = cfg.distance ? -1.5 : 0.0;          // _seed_weights: p_k ~ N(-1.5, 0.5^2), d_k ~ N(0, 0.5^2)
        diag = seeded.normal(seed, "diag", rows * d);
        for (let k = 0; k < diag.length; k++) {
          diag[k] = mean + 0.5 * diag[k];
          if (cfg.distance) diag[k] = softplus(diag[k]);  // DiagonalForm.matrix: D_k = softplus(p_k) (distance)
        }
      }
      const Wq = linear(seed, "W_Q", d, d);
      layer.att = {Wq, WqT: transpose(Wq, d, d), Wk: linear(seed, "W_K", d, d), diag, rows,
                   rope: cfg.rope ? ropeTables(cfg.n, cfg.dh) : null, beta: Math.pow(cfg.dh, -0.5)};
    }
    if (name !== "attention") {
      const U = linear(seed, "U_mlp", f, d);          // up_proj U (f, d), and gate_proj G
      layer.mlp = {U, UT: transpose(U, f, d), G: linear(seed, "G_mlp", f, d)};
    }
    layer.P = preconditioner(cfg, name === "mlp" ? "P_mlp" : "P_att");
    return layer;
  }

  function preconditioner(cfg, prefix) {
    // mirrors precondition.Preconditioner with _seed_weights' factors: P = diag(softplus p) + U V^T + V U^T (dlr),
    // + U U^T (psd) or I (none); p = softplus^-1(1) in float32, U, V ~ N(0, p_scale^2 / d), (d, r) each
    const {d, rank: r, seed, preconditioner: kind} = cfg;
    if (kind === "none") return {kind, d, r};
    const scale = cfg.p_scale / Math.sqrt(d);
    const factor = (name) => {
      const z = seeded.normal(seed, `${prefix}.${name}`, d * r);
      for (let k = 0; k < z.length; k++) z[k] = scale * z[k];
      return z;
    };
    return {kind, d, r, s: softplus(P_START), U: factor("U"), V: kind === "dlr" ? factor("V") : null,
            gu: new Float64Array(r), gv: new Float64Array(r)};
  }

  function applyP(P, g, goff, out, ooff) {
    // mirrors Preconditioner.forward on one row: P g = softplus(p) g + (U V^T + V U^T) g (dlr) or + U U^T g (psd)
    const d = P.d;
    if (P.kind === "none") {
      for (let m = 0; m < d; m++) out[ooff + m] = g[goff + m];
      return;
    }
    const {r, U, V, s, gu, gv} = P;
    gu.fill(0);
    for (let m = 0; m < d; m++) {
      const gm = g[goff + m];
      for (let q = 0; q < r; q++) gu[q] += gm * U[m * r + q];                 // U^T g
    }
    if (V) {
      gv.fill(0);
      for (let m = 0; m < d; m++) {
        const gm = g[goff + m];
        for (let q = 0; q < r; q++) gv[q] += gm * V[m * r + q];               // V^T g
      }
    }
    for (let m = 0; m < d; m++) {
      let low = 0;
      if (V) for (let q = 0; q < r; q++) low += U[m * r + q] * gv[q] + V[m * r + q] * gu[q];   // (U V^T + V U^T) g
      else for (let q = 0; q < r; q++) low += U[m * r + q] * gu[q];                            // U U^T g
      out[ooff + m] = s * g[goff + m] + low;
    }
  }

  function transpose(a, rows, cols, block) {
    // a (rows, cols) as (cols, rows); with `block`, each run of `block` rows is transposed on its own
    const out = new Float64Array(rows * cols), b = block || rows;
    for (let base = 0; base < rows; base += b) {
      for (let r = 0; r < b; r++) {
        for (let q = 0; q < cols; q++) out[base * cols + q * b + r] = a[(base + r) * cols + q];
      }
    }
    return out;
  }

  function rmsNorm(h, n, d) {
    // nn.RMSNorm with weight 1 (EnergyDescentLayer.norm): c_j = h_j / sqrt(mean(h_j^2) + eps)
    const out = new Float64Array(n * d);
    for (let i = 0; i < n; i++) {
      let ss = 0;
      for (let m = 0; m < d; m++) ss += h[i * d + m] * h[i * d + m];
      const inv = 1 / Math.sqrt(ss / d + NORM_EPS);
      for (let m = 0; m < d; m++) out[i * d + m] = h[i * d + m] * inv;
    }
    return out;
  }

  // -- matrix products ---------------------------------------------------------------------------------------------

  const FULL = 0, LOWER = 1, CAUSAL = 2;   // matmul's modes: every C[i][j]; only j <= i; sums over m <= i only

  function matmul(A, ao, lda, B, bo, ldb, C, co, ldc, rows, cols, inner, mode, add) {
    // C[i][j] (+)= sum_m A[i][m] B[j][m] (B's rows are the columns of the product: a Linear's weight as it is
    // stored), for i < rows, j < cols, m < inner. LOWER computes j <= i only (causal scores); CAUSAL sums over
    // m <= i only (a product with causal weights, zero beyond i). Two rows by two columns at a time: each load
    // serves two multiply-adds, which is what bounds this loop in JavaScript.
    for (let i = 0; i < rows; i += 2) {
      const two = i + 1 < rows, a0 = ao + i * lda, a1 = a0 + lda, c0 = co + i * ldc, c1 = c0 + ldc;
      const len = mode === CAUSAL ? Math.min(inner, i + 2) : inner, end = mode === LOWER ? Math.min(cols, i + 2) : cols;
      for (let j = 0; j < end; j += 2) {
        const pair = j + 1 < end, b0 = bo + j * ldb, b1 = pair ? b0 + ldb : b0;
        let s00 = 0, s01 = 0, s10 = 0, s11 = 0;
        if (two) {
          for (let m = 0; m < len; m++) {
            const x0 = A[a0 + m], x1 = A[a1 + m], y0 = B[b0 + m], y1 = B[b1 + m];
            s00 += x0 * y0;
            s01 += x0 * y1;
            s10 += x1 * y0;
            s11 += x1 * y1;
          }
        } else {
          for (let m = 0; m < len; m++) {
            const x0 = A[a0 + m];
            s00 += x0 * B[b0 + m];
            s01 += x0 * B[b1 + m];
          }
        }
        if (add) {
          C[c0 + j] += s00;
          if (pair) C[c0 + j + 1] += s01;
          if (two) {
            C[c1 + j] += s10;
            if (pair) C[c1 + j + 1] += s11;
          }
        } else {
          C[c0 + j] = s00;
          if (pair) C[c0 + j + 1] = s01;
          if (two) {
            C[c1 + j] = s10;
            if (pair) C[c1 + j + 1] = s11;
          }
        }
      }
    }
  }

  // -- the fixed context, once for all T steps ---------------------------------------------------------------------

  function context(layer, cfg, c) {
    // mirrors InteractionTerm._interaction_context and ElementwiseTerm._elementwise_context
    const {n, d, H, dh, f} = cfg, ctx = {c};
    const att = layer.att;
    if (att) {
      const keys = new Float64Array(H * n * dh);       // R_j W_K,k c_j: (H, n, d_h)
      for (let k = 0; k < H; k++) {
        matmul(c, 0, d, att.Wk, k * dh * d, d, keys, k * n * dh, dh, n, dh, d, FULL);
        if (att.rope) for (let j = 0; j < n; j++) turn(keys, (k * n + j) * dh, att.rope, j, 1);
      }
      ctx.keys = keys;
      ctx.keysT = transpose(keys, H * n, dh, n);      // (H, d_h, n): the readouts sum over j
      ctx.cT = transpose(c, n, d);                     // (d, n)
      if (att.rows) {
        // D_k c_j per diagonal row (H rows per head, 1 shared): the diagonal's part of the score is x_i . (D_k c_j)
        const rows = att.rows, Dc = new Float64Array(rows * n * d);
        const kb = cfg.distance ? new Float64Array(rows * n) : null;
        for (let k = 0; k < rows; k++) {
          for (let j = 0; j < n; j++) {
            let cdc = 0;
            for (let m = 0; m < d; m++) {
              const dk = att.diag[k * d + m], cm = c[j * d + m];
              Dc[(k * n + j) * d + m] = dk * cm;
              cdc += cm * cm * dk;
            }
            if (kb) kb[k * n + j] = -0.5 * cdc;       // the key bias -(1/2) c_j^T D_k c_j (distance form)
          }
        }
        ctx.Dc = Dc;
        ctx.kb = kb;
      }
      // scratch of every iterate: W_Q x (n, d), the scores (n, n), their weights where the trace keeps none, the
      // shared diagonal's bias and head-summed weights (n, n), the heads' readouts (n, d), sum_j a_ij c_j (n, d)
      ctx.work = {q: new Float64Array(n * d), scores: new Float64Array(n * n), a: new Float64Array(n * n),
                  bias: new Float64Array(n * n), summed: new Float64Array(n * n), o: new Float64Array(n * d),
                  oc: new Float64Array(n * d)};
    }
    if (layer.mlp) {
      const gate = new Float64Array(n * f);           // G c: (n, f)
      matmul(c, 0, d, layer.mlp.G, 0, d, gate, 0, f, n, f, d, FULL);
      ctx.gate = gate;
      ctx.z = new Float64Array(n * f);                // U x, then phi(U x) * G c
    }
    return ctx;
  }

  // -- one iterate: -grad E and E at x^(t) ------------------------------------------------------------------------

  function attentionPass(layer, cfg, ctx, x, u, e, weights) {
    // mirrors InteractionTerm._interaction_gradient (u += -grad E_att) and attention_energy (e += E_att, no anchor):
    //   s^k_ij = (R_i W_Q,k x_i)^T (R_j W_K,k c_j) + x_i^T D_k c_j [- (1/2)(x_i - c_j)^T D_k (x_i - c_j) in distance
    //   form, its x_i^T D_k x_i added after the log-sum-exp], a^k_ij = softmax_{j<=i}(beta s^k_ij),
    //   E_att = -sum_k (1/beta) LSE_{j<=i}(beta s^k_ij),
    //   -grad E_att = sum_k W_Q,k^T R_i^T sum_j a^k_ij R_j W_K,k c_j + sum_k D_k (sum_j a^k_ij c_j [- x_i]).
    // The weights a^k_ij go to `weights` (H, n, n) when it is given; without `u` only the energy is computed.
    const {n, d, H, dh} = cfg, att = layer.att, {keys, keysT, Dc, kb, cT} = ctx, beta = att.beta;
    const diag = att.diag, shared = cfg.diagonal === "shared", perHead = cfg.diagonal === "per_head";
    const {q, scores: S, bias, summed, o, oc} = ctx.work;
    matmul(x, 0, d, att.Wq, 0, d, q, 0, d, n, d, d, FULL);                     // W_Q x_i
    if (att.rope) for (let i = 0; i < n; i++) for (let k = 0; k < H; k++) turn(q, i * d + k * dh, att.rope, i, 1);
    if (shared) {                                       // the head-independent bias x_i . (d c_j) [- (1/2) c_j^T D c_j]
      matmul(x, 0, d, Dc, 0, d, bias, 0, n, n, n, d, LOWER);
      if (kb) for (let i = 0; i < n; i++) for (let j = 0; j <= i; j++) bias[i * n + j] += kb[j];
      if (u) summed.fill(0);
    }
    for (let k = 0; k < H; k++) {
      const A = weights ? weights.subarray(k * n * n, (k + 1) * n * n) : ctx.work.a;
      matmul(q, k * dh, d, keys, k * n * dh, dh, S, 0, n, n, n, dh, LOWER);    // (R_i W_Q,k x_i) . (R_j W_K,k c_j)
      if (perHead) matmul(x, 0, d, Dc, k * n * d, d, S, 0, n, n, n, d, LOWER, true);   // + x_i . (D_k c_j)
      const dr = shared ? 0 : k * d;
      for (let i = 0; i < n; i++) {
        const row = i * n;
        let max = -Infinity;
        for (let j = 0; j <= i; j++) {
          let z = S[row + j];
          if (perHead && kb) z += kb[k * n + j];      // - (1/2) c_j^T D_k c_j
          else if (shared) z += bias[row + j];
          z *= beta;
          S[row + j] = z;
          if (z > max) max = z;
        }
        let Z = 0;
        for (let j = 0; j <= i; j++) {
          const w = Math.exp(S[row + j] - max);
          A[row + j] = w;
          Z += w;
        }
        let energy = -(max + Math.log(Z)) / beta;     // -(1/beta) LSE_j(beta s^k_ij)
        if (cfg.distance) {                           // the score's -(1/2) x_i^T D_k x_i, outside the LSE
          let xdx = 0;
          for (let m = 0; m < d; m++) xdx += x[i * d + m] * x[i * d + m] * diag[dr + m];
          energy += 0.5 * xdx;
        }
        e[i] += energy;
        for (let j = 0; j <= i; j++) A[row + j] /= Z; // a^k_ij
        if (u && shared) for (let j = 0; j <= i; j++) summed[row + j] += A[row + j];
      }
      if (!u) continue;
      matmul(A, 0, n, keysT, k * dh * n, n, o, k * dh, d, n, dh, n, CAUSAL);   // sum_j a^k_ij R_j W_K,k c_j
      if (att.rope) for (let i = 0; i < n; i++) turn(o, i * d + k * dh, att.rope, i, -1);   // R_i^T (...)
      if (perHead) {                                    // + D_k sum_j a^k_ij c_j [- D_k x_i]
        matmul(A, 0, n, cT, 0, n, oc, 0, d, n, d, n, CAUSAL);
        for (let i = 0; i < n; i++) {
          for (let r = 0; r < d; r++) {
            const v = oc[i * d + r];
            u[i * d + r] += diag[dr + r] * (cfg.distance ? v - x[i * d + r] : v);
          }
        }
      }
    }
    if (!u) return;
    matmul(o, 0, d, att.WqT, 0, d, u, 0, d, n, d, d, FULL, true);            // + sum_k W_Q,k^T (...), heads merged
    if (shared) {                                       // + d sum_j (sum_k a^k_ij) c_j [- H D x_i]
      matmul(summed, 0, n, cT, 0, n, oc, 0, d, n, d, n, CAUSAL);
      for (let i = 0; i < n; i++) {
        for (let r = 0; r < d; r++) {
          const v = oc[i * d + r];
          u[i * d + r] += diag[r] * (cfg.distance ? v - H * x[i * d + r] : v);
        }
      }
    }
  }

  function mlpPass(layer, cfg, ctx, x, u, e) {
    // mirrors ElementwiseTerm._elementwise_gradient (u += U^T (phi(U x) * G c)) and energy.mlp_energy
    // (e += -sum_m (G c)_m Phi((U x)_m))
    const {n, d, f} = cfg, {U, UT} = layer.mlp, {gate, z} = ctx, {phi, Phi} = cfg.activation;
    matmul(x, 0, d, U, 0, d, z, 0, f, n, f, d, FULL);                          // U x_i: (n, f)
    for (let i = 0; i < n; i++) {
      let energy = 0;
      for (let m = i * f; m < (i + 1) * f; m++) {
        energy -= gate[m] * Phi(z[m]);
        z[m] = phi(z[m]) * gate[m];                     // phi(U x) * G c
      }
      e[i] += energy;
    }
    if (u) matmul(z, 0, f, UT, 0, f, u, 0, d, n, d, f, FULL, true);           // U^T (phi(U x) * G c)
  }

  // -- the trace: mirrors EnergyDescentLayer.trace ----------------------------------------------------------------

  function trace(layer, cfg, h) {
    // x^(0) = Norm(h); x^(t+1) = x^(t) + eta P (-grad E(x^(t)) - lambda (x^(t) - x^(0))) (descent._step,
    // _displacement); E(x^(t)) per token with the anchor (lambda/2)|x - x^(0)|^2 (energy.with_anchor)
    const {n, d, H, T, eta, anchor} = cfg, nd = n * d;
    const c = rmsNorm(h, n, d), ctx = context(layer, cfg, c);
    const iterates = new Float64Array((T + 1) * nd), energies = new Float64Array((T + 1) * n);
    const weights = layer.att ? new Float64Array(T * H * n * n) : null;
    iterates.set(c, 0);
    const u = new Float64Array(nd), v = new Float64Array(d), step = new Float64Array(d);
    for (let t = 0; t <= T; t++) {
      const x = iterates.subarray(t * nd, (t + 1) * nd), e = energies.subarray(t * n, (t + 1) * n);
      const last = t === T;
      u.fill(0);
      if (layer.att) attentionPass(layer, cfg, ctx, x, last ? null : u, e,
                                   last ? null : weights.subarray(t * H * n * n, (t + 1) * H * n * n));
      if (layer.mlp) mlpPass(layer, cfg, ctx, x, last ? null : u, e);   // E_block = E_att + E_mlp (joint)
      for (let i = 0; i < n; i++) {
        if (anchor) {                                   // + (lambda/2)|x - x^(0)|^2 (energy.anchor_energy)
          let ss = 0;
          for (let m = 0; m < d; m++) ss += (x[i * d + m] - c[i * d + m]) ** 2;
          e[i] += 0.5 * anchor * ss;
        }
        if (last) continue;
        for (let m = 0; m < d; m++) {                  // -grad E - lambda (x - x^(0)) (descent._displacement)
          v[m] = anchor ? u[i * d + m] - anchor * (x[i * d + m] - c[i * d + m]) : u[i * d + m];
        }
        applyP(layer.P, v, 0, step, 0);
        const next = (t + 1) * nd + i * d;
        for (let m = 0; m < d; m++) iterates[next + m] = x[i * d + m] + eta * step[m];   // x + eta P (-grad E)
      }
    }
    return {c, ctx, iterates, energies, weights};
  }

  // -- the landscape: mirrors figdata.landscape, _plane and key_tips ---------------------------------------------

  function plane(path, T, d) {
    // mirrors figdata._plane: width 2, the true plane (origin 0, the axes); otherwise the plane through x^(0)
    // spanned by the first two update directions (Gram-Schmidt), else the coordinate axes
    if (d === 2) return {origin: new Float64Array(2), basis: Float64Array.of(1, 0, 0, 1)};
    const basis = new Float64Array(2 * d), r = new Float64Array(d), v = new Float64Array(d);
    let found = 0;
    for (let k = 0; k < 2 + d && found < 2; k++) {
      if (k < 2) {                                      // path[1:3] - path[:2] (at T = 1: x1 - x0, then 0)
        for (let m = 0; m < d; m++) v[m] = k + 1 > T ? 0 : path[(k + 1) * d + m] - path[k * d + m];
      } else {
        v.fill(0);
        v[k - 2] = 1;                                   // e_(k-2)
      }
      for (let m = 0; m < d; m++) r[m] = 0;             // r = v - sum_e (v . e) e
      for (let q = 0; q < found; q++) {
        const ve = dot(v, 0, basis, q * d, d);
        for (let m = 0; m < d; m++) r[m] += ve * basis[q * d + m];
      }
      for (let m = 0; m < d; m++) r[m] = v[m] - r[m];
      const rn = Math.sqrt(dot(r, 0, r, 0, d)), vn = Math.sqrt(dot(v, 0, v, 0, d));
      if (rn > 1e-6 * vn) {
        for (let m = 0; m < d; m++) basis[found * d + m] = r[m] / rn;
        found++;
      }
    }
    return {origin: path.slice(0, d), basis};
  }

  function keyTips(layer, cfg, ctx, token) {
    // mirrors figdata.key_tips: x^(0) + eta P v^k_j, v^k_j = W_Q,k^T R_i^T R_j W_K,k c_j + D_k c_j
    // [- D_k x^(0) in distance form], for every head k and key j <= token: (H, token + 1, d)
    const {n, d, H, dh} = cfg, att = layer.att, {keys, c} = ctx, diag = att.diag;
    const tips = new Float64Array(H * (token + 1) * d), key = new Float64Array(dh), v = new Float64Array(d);
    const step = new Float64Array(d), ci = token * d;
    for (let k = 0; k < H; k++) {
      const dr = att.rows === 1 ? 0 : k * d;
      for (let j = 0; j <= token; j++) {
        for (let m = 0; m < dh; m++) key[m] = keys[(k * n + j) * dh + m];
        if (att.rope) turn(key, 0, att.rope, token, -1);   // R_i^T R_j W_K,k c_j
        v.fill(0);
        for (let m = 0; m < dh; m++) {
          const w = (k * dh + m) * d, km = key[m];
          for (let r = 0; r < d; r++) v[r] += km * att.Wq[w + r];
        }
        if (diag) for (let r = 0; r < d; r++) v[r] += diag[dr + r] * c[j * d + r];
        if (cfg.distance) for (let r = 0; r < d; r++) v[r] -= diag[dr + r] * c[ci + r];
        applyP(layer.P, v, 0, step, 0);
        const to = (k * (token + 1) + j) * d;
        for (let r = 0; r < d; r++) tips[to + r] = c[ci + r] + cfg.eta * step[r];
      }
    }
    return tips;
  }

  function linspace(lo, hi, steps) {
    // torch.linspace's CPU kernel: start + i step in the first half, end - (steps - 1 - i) step in the second
    const out = new Float64Array(steps), step = (hi - lo) / (steps - 1), half = Math.floor(steps / 2);
    for (let i = 0; i < steps; i++) out[i] = i < half ? lo + step * i : hi - step * (steps - i - 1);
    return out;
  }

  function landscape(layer, cfg, ctx, token, path) {
    // mirrors figdata.landscape: the energy of `token` on the plane of its path, energy[k][l] at (a[l], b[k]),
    // E = energy_at (each layer's _token_energy: E_att(x | c_{1:i}) [+ E_mlp(x | c_i)] + (lambda/2)|x - c_i|^2)
    const {d, H, T} = cfg, G = LANDSCAPE_GRID, c = ctx.c;
    const {origin, basis} = plane(path, T, d);
    const trajectory = new Float64Array((T + 1) * 2), offPlane = new Float64Array(T + 1), diff = new Float64Array(d);
    for (let t = 0; t <= T; t++) {                      // (path - origin) @ basis^T, and the distance off the plane
      for (let m = 0; m < d; m++) diff[m] = path[t * d + m] - origin[m];
      const a = dot(diff, 0, basis, 0, d), b = dot(diff, 0, basis, d, d);
      trajectory[2 * t] = a;
      trajectory[2 * t + 1] = b;
      let ss = 0;
      for (let m = 0; m < d; m++) ss += (diff[m] - (a * basis[m] + b * basis[d + m])) ** 2;
      offPlane[t] = Math.sqrt(ss);
    }
    let tips = null;
    const lo = [Infinity, Infinity], hi = [-Infinity, -Infinity];   // over the trajectory and the key tips
    for (let q = 0; q < 2; q++) {
      for (let t = 0; t <= T; t++) {
        lo[q] = Math.min(lo[q], trajectory[2 * t + q]);
        hi[q] = Math.max(hi[q], trajectory[2 * t + q]);
      }
    }
    if (layer.att) {
      const points = keyTips(layer, cfg, ctx, token), count = H * (token + 1);
      tips = new Float64Array(count * 2);
      for (let p = 0; p < count; p++) {
        for (let m = 0; m < d; m++) diff[m] = points[p * d + m] - origin[m];
        for (let q = 0; q < 2; q++) {
          const z = dot(diff, 0, basis, q * d, d);
          tips[2 * p + q] = z;
          lo[q] = Math.min(lo[q], z);
          hi[q] = Math.max(hi[q], z);
        }
      }
    }
    const pad = 0.15 * Math.max(hi[0] - lo[0], hi[1] - lo[1]) + 0.1;
    const A = linspace(lo[0] - pad, hi[0] + pad, G), B = linspace(lo[1] - pad, hi[1] + pad, G);
    const energy = new Float64Array(G * G);
    if (layer.att) attentionLandscape(layer, cfg, ctx, token, origin, basis, A, B, energy);
    if (layer.mlp) mlpLandscape(layer, cfg, ctx, token, origin, basis, A, B, energy);
    if (cfg.anchor) {                                   // + (lambda/2)|x - c_i|^2 at x = origin + a e1 + b e2
      for (let k = 0; k < G; k++) {
        for (let l = 0; l < G; l++) {
          let ss = 0;
          for (let m = 0; m < d; m++) ss += (origin[m] + A[l] * basis[m] + B[k] * basis[d + m] - c[token * d + m]) ** 2;
          energy[k * G + l] += 0.5 * cfg.anchor * ss;
        }
      }
    }
    return {a: arr(A, [G]), b: arr(B, [G]), energy: arr(energy, [G, G]), trajectory: arr(trajectory, [T + 1, 2]),
            origin: arr(origin, [d]), basis: arr(basis, [2, d]), off_plane: arr(offPlane, [T + 1]),
            key_tips: tips ? arr(tips, [H, token + 1, 2]) : null, true_plane: d === 2};
  }

  function attentionLandscape(layer, cfg, ctx, token, origin, basis, A, B, energy) {
    // E_att(x | c_{1:i}) on the plane (InteractionTerm._interaction_token_energy): the score is affine in
    // x = o + a e1 + b e2, s^k_j = s^k_j(o) + a s^k_j(e1) + b s^k_j(e2) (linear part; the key bias added), and the
    // distance form's -(1/2) x^T D_k x is a quadratic in (a, b), so each grid point costs O(H i), not O(H i d)
    const {d, H, dh, n} = cfg, att = layer.att, {keys, Dc, kb} = ctx, beta = att.beta, G = LANDSCAPE_GRID;
    const count = token + 1, lin = new Float64Array(3 * H * count), quad = new Float64Array(6 * H);
    const q = new Float64Array(d), dirs = [origin, basis.subarray(0, d), basis.subarray(d, 2 * d)];
    for (let p = 0; p < 3; p++) {
      const x = dirs[p];
      for (let r = 0; r < d; r++) q[r] = dot(att.Wq, r * d, x, 0, d);     // W_Q x
      for (let k = 0; k < H; k++) {
        if (att.rope) turn(q, k * dh, att.rope, token, 1);               // R_i W_Q,k x
        for (let j = 0; j < count; j++) {
          let s = dot(q, k * dh, keys, (k * n + j) * dh, dh);
          if (att.rows) s += dot(x, 0, Dc, ((att.rows === 1 ? 0 : k) * n + j) * d, d);   // + x^T D_k c_j
          lin[(k * count + j) * 3 + p] = s;
        }
      }
    }
    if (cfg.distance) {                       // x^T D_k x = Q00 + 2a Q01 + 2b Q02 + a^2 Q11 + 2ab Q12 + b^2 Q22
      for (let k = 0; k < H; k++) {
        const dr = att.rows === 1 ? 0 : k * d;
        let z = 0;
        for (const [p1, p2] of [[0, 0], [0, 1], [0, 2], [1, 1], [1, 2], [2, 2]]) {
          let acc = 0;
          for (let m = 0; m < d; m++) acc += dirs[p1][m] * att.diag[dr + m] * dirs[p2][m];
          quad[6 * k + z++] = acc;
        }
      }
    }
    const z = new Float64Array(count);
    for (let k0 = 0; k0 < G; k0++) {
      const b = B[k0];
      for (let l = 0; l < G; l++) {
        const a = A[l];
        let e = 0;
        for (let k = 0; k < H; k++) {
          let max = -Infinity;
          for (let j = 0; j < count; j++) {
            const o = (k * count + j) * 3;
            let s = lin[o] + a * lin[o + 1] + b * lin[o + 2];
            if (kb) s += kb[(att.rows === 1 ? 0 : k) * n + j];
            const v = beta * s;
            z[j] = v;
            if (v > max) max = v;
          }
          let Z = 0;
          for (let j = 0; j < count; j++) Z += Math.exp(z[j] - max);
          e -= (max + Math.log(Z)) / beta;             // -(1/beta) LSE_j(beta s^k_ij)
          if (cfg.distance) {
            const Q = 6 * k;
            e += 0.5 * (quad[Q] + 2 * a * quad[Q + 1] + 2 * b * quad[Q + 2] + a * a * quad[Q + 3]
                        + 2 * a * b * quad[Q + 4] + b * b * quad[Q + 5]);
          }
        }
        energy[k0 * G + l] += e;
      }
    }
  }

  function mlpLandscape(layer, cfg, ctx, token, origin, basis, A, B, energy) {
    // E_mlp(x | c_i) = -sum_m (G c_i)_m Phi((U x)_m) on the plane (ElementwiseTerm._elementwise_token_energy),
    // with U x = U o + a U e1 + b U e2
    const {d, f} = cfg, U = layer.mlp.U, gate = ctx.gate, Phi = cfg.activation.Phi, G = LANDSCAPE_GRID;
    const z0 = new Float64Array(f), z1 = new Float64Array(f), z2 = new Float64Array(f);
    for (let m = 0; m < f; m++) {
      z0[m] = dot(U, m * d, origin, 0, d);
      z1[m] = dot(U, m * d, basis, 0, d);
      z2[m] = dot(U, m * d, basis, d, d);
    }
    const go = token * f;
    for (let k = 0; k < G; k++) {
      const b = B[k];
      for (let l = 0; l < G; l++) {
        const a = A[l];
        let e = 0;
        for (let m = 0; m < f; m++) e -= gate[go + m] * Phi(z0[m] + a * z1[m] + b * z2[m]);
        energy[k * G + l] += e;
      }
    }
  }

  // -- P's eigenvalues: mirrors np.linalg.eigvalsh(Preconditioner.matrix()) ---------------------------------------

  function jacobiEigenvalues(S, K) {
    // the eigenvalues of the symmetric K x K matrix S (overwritten), by cyclic Jacobi rotations
    for (let sweep = 0; sweep < 100; sweep++) {
      let off = 0, all = 0;
      for (let p = 0; p < K; p++) {
        for (let q = 0; q < K; q++) {
          all += S[p * K + q] ** 2;
          if (p !== q) off += S[p * K + q] ** 2;
        }
      }
      if (off <= 1e-34 * all) break;
      for (let p = 0; p < K - 1; p++) {
        for (let q = p + 1; q < K; q++) {
          const apq = S[p * K + q];
          if (apq === 0) continue;
          const theta = (S[q * K + q] - S[p * K + p]) / (2 * apq);
          const t = Math.abs(theta) > 1e150 ? 0.5 / theta
            : Math.sign(theta || 1) / (Math.abs(theta) + Math.sqrt(theta * theta + 1));
          const cs = 1 / Math.sqrt(t * t + 1), sn = t * cs;
          for (let r = 0; r < K; r++) {                 // columns p, q
            const sp = S[r * K + p], sq = S[r * K + q];
            S[r * K + p] = cs * sp - sn * sq;
            S[r * K + q] = sn * sp + cs * sq;
          }
          for (let r = 0; r < K; r++) {                 // rows p, q
            const sp = S[p * K + r], sq = S[q * K + r];
            S[p * K + r] = cs * sp - sn * sq;
            S[q * K + r] = sn * sp + cs * sq;
          }
        }
      }
    }
    const out = new Float64Array(K);
    for (let p = 0; p < K; p++) out[p] = S[p * K + p];
    return out;
  }

  function eigenvalues(P) {
    // P = s I + W M W^T with s = softplus(p) (one value: p starts equal) and W = [U V], M = [[0, I], [I, 0]] (dlr)
    // or W = U, M = I (psd): with W = Q R (Householder, R: K x cols, K = min(d, cols)) P's eigenvalues are
    // s + eig(R M R^T) and s repeated d - K times, ascending. P = I for "none".
    const d = P.d;
    if (P.kind === "none") return new Float64Array(d).fill(1);
    const r = P.r, cols = P.V ? 2 * r : r, W = new Float64Array(d * cols);
    for (let m = 0; m < d; m++) {
      for (let q = 0; q < r; q++) {
        W[m * cols + q] = P.U[m * r + q];
        if (P.V) W[m * cols + r + q] = P.V[m * r + q];
      }
    }
    const K = Math.min(d, cols), v = new Float64Array(d);
    for (let q = 0; q < K; q++) {                      // Householder: zero W[q+1:, q]
      let norm = 0;
      for (let m = q; m < d; m++) norm += W[m * cols + q] ** 2;
      norm = Math.sqrt(norm);
      if (norm === 0) continue;
      const alpha = W[q * cols + q] > 0 ? -norm : norm;
      for (let m = q; m < d; m++) v[m] = W[m * cols + q];
      v[q] -= alpha;
      let vv = 0;
      for (let m = q; m < d; m++) vv += v[m] * v[m];
      if (vv === 0) continue;
      for (let p = q; p < cols; p++) {
        let vw = 0;
        for (let m = q; m < d; m++) vw += v[m] * W[m * cols + p];
        const g = 2 * vw / vv;
        for (let m = q; m < d; m++) W[m * cols + p] -= g * v[m];
      }
    }
    const S = new Float64Array(K * K);                // R M R^T from R = W[:K] (upper trapezoidal)
    for (let p = 0; p < K; p++) {
      for (let q = 0; q < K; q++) {
        let acc = 0;
        for (let k = 0; k < r; k++) {
          acc += P.V ? W[p * cols + k] * W[q * cols + r + k] + W[p * cols + r + k] * W[q * cols + k]
            : W[p * cols + k] * W[q * cols + k];
        }
        S[p * K + q] = acc;
      }
    }
    const lam = jacobiEigenvalues(S, K), out = new Float64Array(d).fill(P.s);
    for (let p = 0; p < K; p++) out[p] = P.s + lam[p];
    return out.sort();
  }

  // -- explore: mirrors cem_core.ui.explore.explore ----------------------------------------------------------------

  const RISE_TOLERANCE = 1e-12, SETTLED = 1e-3, SHRINKING = 0.5, GROWING = 10.0, ROUNDING = 1e-12;   // explore's

  function arr(data, shape) {
    return {shape, data};
  }

  function explore(controls, token) {
    // {token, phases: [{name, energies (T+1, n), update_norms (T, n), radius (T+1, n), path (T+1, d),
    // weights (T, H, n, n) or null, landscape, rose (T, n), eigenvalues (d)}]}
    const cfg = configOf(controls), {n, d, H, T} = cfg;
    token = token === undefined || token === null ? followed(controls) : token;
    if (!(Number.isInteger(token) && token >= 0 && token < n)) {
      throw new RangeError(`token=${token} is invalid: must be in [0, ${n - 1}]`);
    }
    let h = seeded.normal(cfg.seed, "h", n * d);        // explore.seeded_input: h (n, d) from stream "h"
    const phases = [];
    for (const name of cfg.phases) {
      const layer = buildLayer(cfg, name), tr = trace(layer, cfg, h), x = tr.iterates, E = tr.energies;
      const norms = new Float64Array(T * n), radius = new Float64Array((T + 1) * n), rose = new Uint8Array(T * n);
      for (let t = 0; t <= T; t++) {
        for (let i = 0; i < n; i++) {
          const o = (t * n + i) * d;
          let rr = 0, uu = 0;
          for (let m = 0; m < d; m++) {
            rr += x[o + m] * x[o + m];
            if (t < T) uu += (x[o + n * d + m] - x[o + m]) ** 2;
          }
          radius[t * n + i] = Math.sqrt(rr);            // |x_i^(t)|
          if (t < T) norms[t * n + i] = Math.sqrt(uu);  // |x_i^(t+1) - x_i^(t)| (Trace.update_norms)
        }
      }
      let scale = 1.0;                                  // max |E|, at least 1
      for (let k = 0; k < E.length; k++) scale = Math.abs(E[k]) > scale || Number.isNaN(E[k]) ? Math.abs(E[k]) : scale;
      for (let k = 0; k < T * n; k++) rose[k] = E[k + n] - E[k] > RISE_TOLERANCE * scale ? 1 : 0;
      const path = new Float64Array((T + 1) * d);       // x_token^(t)
      for (let t = 0; t <= T; t++) path.set(x.subarray((t * n + token) * d, (t * n + token + 1) * d), t * d);
      phases.push({
        name, energies: arr(E, [T + 1, n]), update_norms: arr(norms, [T, n]), radius: arr(radius, [T + 1, n]),
        path: arr(path, [T + 1, d]), weights: tr.weights ? arr(tr.weights, [T, H, n, n]) : null,
        landscape: landscape(layer, cfg, tr.ctx, token, path), rose: arr(rose, [T, n]),
        eigenvalues: arr(eigenvalues(layer.P), [d]),
      });
      const next = new Float64Array(n * d);             // h + x^(T) - x^(0): a block's MLP sees the attention's output
      for (let k = 0; k < n * d; k++) next[k] = h[k] + x[T * n * d + k] - x[k];
      h = next;
    }
    return {token, phases};
  }

  const formatG = (x, precision) => root.CEMFormat.formatG(x, precision);   // pyformat.js: Python's format

  // -- diagnose: mirrors cem_core.ui.explore.diagnose_phase --------------------------------------------------------

  function argmax(a) {                                  // numpy's argmax: the first maximum, or the first NaN
    let best = 0;
    for (let k = 0; k < a.length; k++) {
      if (Number.isNaN(a[k])) return k;
      if (a[k] > a[best]) best = k;
    }
    return best;
  }

  function stepsText(steps) {                           // mirrors explore._steps_text: 1, 2, 3, 5 -> "1–3, 5"
    const runs = [];
    let first = steps[0];
    for (let k = 0; k < steps.length; k++) {
      const prev = steps[k], t = k + 1 < steps.length ? steps[k + 1] : null;
      if (t !== prev + 1) {
        runs.push(first === prev ? String(first) : `${first}–${prev}`);
        first = t;
      }
    }
    return runs.join(", ");
  }

  function diagnosePhase(c, phase) {
    const name = phase.name, [T1, n] = phase.energies.shape, T = T1 - 1;
    const E = phase.energies.data, N = phase.update_norms.data, R = phase.radius.data, rose = phase.rose.data;
    const label = {attention: "attention", mlp: "MLP", joint: "joint block"}[name];
    const rises = [];
    for (let i = 0; i < n; i++) {                       // which tokens' energy rose, at which steps, by how much
      const steps = [];
      let amount = -Infinity;
      for (let t = 0; t < T; t++) {
        if (!rose[t * n + i]) continue;
        steps.push(t + 1);
        const up = E[(t + 1) * n + i] - E[t * n + i];
        if (up > amount || Number.isNaN(up)) amount = up;
      }
      if (steps.length) rises.push({token: i, steps, amount});
    }
    const eigs = phase.eigenvalues.data;
    let negative = 0, pMax = -Infinity;
    for (const v of eigs) {
      if (v < 0) negative++;
      if (v > pMax || Number.isNaN(v)) pMax = v;
    }
    const ratio = new Float64Array(n);                  // last step over first, per token
    for (let i = 0; i < n; i++) ratio[i] = N[(T - 1) * n + i] / Math.max(N[i], 1e-300);
    const token = argmax(ratio), worst = ratio[token];
    const course = T === 1 ? "one step" : worst <= SETTLED ? "settles" : worst < SHRINKING ? "slows"
      : worst <= GROWING ? "runs off" : "diverges";
    const first = N[token], last = N[(T - 1) * n + token], g = formatG;
    const shown = last <= ROUNDING * R[T * n + token] ? "0 (to rounding)" : g(last, 3);   // no noise's digits
    const facts = `token ${token}: update norm ${g(first, 3)} → ${shown}, |x| ${g(R[token], 3)} → `
      + `${g(R[T * n + token], 3)}, E ${g(E[token], 4)} → ${g(E[T * n + token], 4)}`;
    const overshoot = c.eta * c.anchor * pMax;          // eta lambda p_max: above 2 a step overshoots
    let parts = riseNotes(c, name, rises, negative, overshoot).concat(courseNotes(course, facts, T, worst));
    if (course === "runs off" || course === "diverges") {
      parts = parts.concat(runoffReason(c, name, negative, overshoot));
    }
    return {phase: name, rises, course, token, norms: [first, last], radius: [R[token], R[T * n + token]],
            energy: [E[token], E[T * n + token]], negative,
            level: rises.length || course === "diverges" ? "warning" : "info",
            text: `**${label}**: ` + parts.join(" ")};
  }

  function distanceForm(c, name) {                      // mirrors explore._distance
    return c.diagonal_form === "distance" && name !== "mlp";
  }

  function riseNotes(c, name, rises, negative, overshoot) {   // mirrors explore._rise_notes
    const eta = c.eta, g = formatG;
    if (!rises.length) {
      return ["the energy fell at every step for every token."].concat(negative
        ? [`P has ${negative} negative eigenvalue(s), yet no step here went uphill; raise η, T or the `
           + "scale, or change the seed, to see a rise."] : []);
    }
    const shown = rises.slice(0, 4).map((r) => `token ${r.token} at step${r.steps.length > 1 ? "s" : ""} `
      + `${stepsText(r.steps)} (up to +${g(r.amount, 3)})`).join("; ");
    const more = rises.length > 4 ? `; and ${rises.length - 4} more token(s)` : "";
    const parts = [`the energy rose: ${shown}${more} (marked ○ on the energy plot).`];
    if (negative) {
      parts.push(`P has ${negative} negative eigenvalue(s): the paper's form diag + UVᵀ + VUᵀ is indefinite `
                 + "here, so −P∇E can point uphill. The psd form diag + UUᵀ always points downhill.");
    } else if (name !== "attention" || distanceForm(c, name)) {
      parts.push("P is positive definite, so each step starts downhill, but "
                 + `${name === "mlp" ? "E_mlp is" : "the energy is"} not concave: a step of `
                 + `η = ${g(eta)} can overshoot; a smaller η descends.`);
    } else {
      parts.push("P is positive definite, so each step starts downhill, but the anchor makes the energy curve "
                 + `upwards and a step of η = ${g(eta)} can overshoot (η λ p_max = ${g(overshoot, 3)}).`);
    }
    return parts;
  }

  function courseNotes(course, facts, T, worst) {       // mirrors explore._course_notes
    if (course === "one step") {
      return [`One step (${facts}) is exactly what the tied layer computes; more steps T show where the `
              + "iterates go."];
    }
    if (course === "settles") {
      return ["The iterates settle into a minimum: every token's steps shrink to at most "
              + `${formatG(SETTLED)} of its first (${facts}).`];
    }
    if (course === "slows") {
      return [`The steps shrink but have not settled within T = ${T} (${facts}); more steps show where they go.`];
    }
    return [(course === "runs off" ? "The iterates run off: the steps do not shrink"
      : `The iterates diverge: the steps grow ${formatG(worst, 3)}×`) + ` (${facts}).`];
  }

  function runoffReason(c, name, negative, overshoot) {  // mirrors explore._runoff_reason
    const anchor = c.anchor, eta = c.eta, distance = distanceForm(c, name), g = formatG;
    const hold = anchor ? `; the anchor λ = ${g(anchor)} is not strong enough to hold it.`
      : "; the anchor (λ/2)|x − x⁽⁰⁾|² can hold it.";
    if (name === "attention" && distance) {
      return ["In distance form E_att is bounded below (its −½(x − c)ᵀD(x − c), D > 0, pulls x back), "
              + `but a step of η = ${g(eta)} can overshoot that pull; a smaller η settles.`];
    }
    if (name === "joint") {
      return ["E_att + E_mlp has no minimum here: "
              + (distance ? "the attention term is bounded below in distance form, but "
                : "the attention term is unbounded below (the distance form bounds it), and ")
              + "a unit with a positive gate (Gc)ₘ lowers E_mlp without bound" + hold];
    }
    if (name === "attention" && anchor === 0) {
      return ["E_att is concave and unbounded below, so it has no minimum to settle into; the anchor "
              + "(λ/2)|x − x⁽⁰⁾|², our extension, or the distance form gives it one."];
    }
    if (name === "attention" && negative) {
      return ["Along P's negative eigenvectors each step pushes x further from x⁽⁰⁾ than the anchor "
              + "pulls it back."];
    }
    if (name === "attention" && overshoot > 2) {
      return [`η λ p_max = ${g(overshoot, 3)} > 2: each step overshoots the anchor's pull `
              + "and lands farther away on the other side."];
    }
    if (name === "mlp") {
      return ["Φ grows like z²/2, so a unit with a positive gate (Gc)ₘ lowers E_mlp without bound along "
              + "its direction" + hold];
    }
    return [];
  }

  function diagnose(controls, data) {                   // mirrors explore.diagnose: one diagnosis per phase
    return data.phases.map((phase) => diagnosePhase(controls, phase));
  }

  // -- plain arrays ------------------------------------------------------------------------------------------------

  function plain(x) {
    // a result with every {shape, data} as nested plain arrays (Uint8Array: booleans)
    if (x === null || typeof x !== "object") return x;
    if (Array.isArray(x)) return x.map(plain);
    if (x.shape && ArrayBuffer.isView(x.data)) {
      const bool = x.data instanceof Uint8Array, shape = x.shape;
      const nest = (offset, axis) => {
        if (axis === shape.length) return bool ? x.data[offset] === 1 : x.data[offset];
        const stride = shape.slice(axis + 1).reduce((p, q) => p * q, 1), out = [];
        for (let k = 0; k < shape[axis]; k++) out.push(nest(offset + k * stride, axis + 1));
        return out;
      };
      return nest(0, 0);
    }
    const out = {};
    for (const key of Object.keys(x)) out[key] = plain(x[key]);
    return out;
  }

  root.CEMExplore = {seeded, explore, diagnose, plain, erf, activations: ACTIVATIONS};
})(globalThis);
