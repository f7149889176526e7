"""The one seeded generator of the energy page's random state: its input h and every layer's weights.

JavaScript reproduces it bit for bit (cem_core/web/explore.js, ``seeded``; tested in Chromium), so the browser
builds the same state as ``cem_core.ui.explore`` from the controls alone. It is counter based, in unsigned 32-bit
arithmetic that both languages compute exactly:

    start(seed, stream) = fmix32(fmix32(seed) xor (stream + 1) * 0x9E3779B9)        (murmur3's finalizer)
    bits_k              = mulberry32(start + (k + 1) * 0x6D2B79F5)                  (its output function)
    u_k                 = (bits_k + 1/2) / 2^32                                      in (0, 1)
    z_k                 = sqrt(-2 log u_2k) cos(2 pi u_2k+1)                        (Box-Muller, one of the pair)

log and cos are not the language's: neither Python's C library nor JavaScript's Math defines them to the bit
(glibc and V8 differ in the last bit for 7 % of these logs and 3 % of these cosines on one machine, and agree on
another). Both sides compute them with the same few adds, multiplies and divides, which IEEE 754 rounds alike
everywhere: ``box_muller_log`` (fdlibm's log) and ``cos_turns`` (fdlibm's cos and sin kernels after an exact
reduction of u by quarter turns), each within 1 ulp of the correctly rounded value.

Each tensor has its own stream (``STREAMS``) and is filled in row-major order from k = 0, so a longer sequence
keeps the first tokens' inputs and changing the sequence length, the layer or T keeps the weights. A block's
attention and MLP and the joint block read the same W_Q, W_K, diagonal, U (up) and G (gate) streams, so "block"
and "joint" compare one set of weights, descended as two energies or as one.
"""
from __future__ import annotations

import math

import numpy as np

MASK = 0xFFFFFFFF
STREAMS = {"h": 0, "W_Q": 1, "W_K": 2, "diag": 3, "P_att.U": 4, "P_att.V": 5, "U_mlp": 6, "G_mlp": 7,
           "P_mlp.U": 8, "P_mlp.V": 9}


def _mul(a, b):
    """a * b mod 2^32 (JavaScript's Math.imul, read as unsigned)."""
    return (a * b) & MASK


def fmix32(h):
    """murmur3's 32-bit finalizer, on ints or uint64 arrays holding 32-bit values."""
    h ^= h >> 16
    h = _mul(h, 0x85EBCA6B)
    h ^= h >> 13
    h = _mul(h, 0xC2B2AE35)
    return h ^ (h >> 16)


def start(seed: int, stream: int) -> int:
    """The stream's starting state: fmix32(fmix32(seed) xor (stream + 1) 0x9E3779B9)."""
    return fmix32(fmix32(seed & MASK) ^ _mul(stream + 1, 0x9E3779B9))


def bits(seed: int, stream: int, count: int) -> np.ndarray:
    """The stream's first `count` outputs, uint32 values in a uint64 array (mulberry32's output function)."""
    a = (start(seed, stream) + _mul(np.arange(1, count + 1, dtype=np.uint64), 0x6D2B79F5)) & MASK
    t = _mul(a ^ (a >> 15), a | 1)
    t = ((t + _mul(t ^ (t >> 7), t | 61)) & MASK) ^ t
    return t ^ (t >> 14)


def uniforms(seed: int, stream: int, count: int) -> np.ndarray:
    """u_k = (bits_k + 1/2) / 2^32 in (0, 1), float64."""
    return (bits(seed, stream, count).astype(np.float64) + 0.5) / 2.0 ** 32


LN2_HI, LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10      # ln 2 = LN2_HI + LN2_LO (fdlibm)
LG = (6.666666666666735130e-01, 3.999999999940941908e-01, 2.857142874366239149e-01, 2.222219843214978396e-01,
      1.818357216161805012e-01, 1.531383769920937332e-01, 1.479819860511658591e-01)   # log's Lg1..Lg7
COS_C = (4.16666666666666019037e-02, -1.38888888888741095749e-03, 2.48015872894767294178e-05,
         -2.75573143513906633035e-07, 2.08757232129817482790e-09, -1.13596475577881948265e-11)   # cos's C1..C6
SIN_S = (-1.66666666666666324348e-01, 8.33333333332248946124e-03, -1.98412698298579493134e-04,
         2.75573137070700676789e-06, -2.50507602534068634195e-08, 1.58969099521155010221e-10)    # sin's S1..S6
SQRT_HALF = 0.7071067811865476
TWO_PI_HI, TWO_PI_LO = 6.283185005187988, 3.019915981956753e-07  # 2 pi = HI + LO, HI of 23 bits (0x1.921fb4p+2)


def box_muller_log(u: np.ndarray) -> np.ndarray:
    """log u for positive normal u, fdlibm's __ieee754_log without its special cases: u = m 2^k with m in
    [sqrt(1/2), sqrt 2), f = m - 1, s = f / (2 + f), log m = f - f^2/2 + s (f^2/2 + R(s^2))."""
    m, k = np.frexp(u)                                         # exact: u = m 2^k, m in [1/2, 1)
    low = m < SQRT_HALF
    m, k = np.where(low, 2.0 * m, m), np.where(low, k - 1, k).astype(np.float64)
    f = m - 1.0
    hfsq = 0.5 * f * f
    s = f / (2.0 + f)
    z = s * s
    w = z * z
    R = z * (LG[0] + w * (LG[2] + w * (LG[4] + w * LG[6]))) + w * (LG[1] + w * (LG[3] + w * LG[5]))
    return k * LN2_HI - ((hfsq - (s * (hfsq + R) + k * LN2_LO)) - f)


def cos_turns(u: np.ndarray) -> np.ndarray:
    """cos(2 pi u): u = q/4 + r exactly (q the nearest quarter turn, |r| <= 1/8; u = (bits + 1/2) / 2^32 is never
    half way), a + y = 2 pi r in [-pi/4, pi/4] to twice the precision (TWO_PI_HI r is exact: r has at most 30
    bits), and cos(a + q pi/2) is cos a, -sin a, -cos a or sin a by q mod 4, with musl's __cos and __sin kernels."""
    q = np.floor(4.0 * u + 0.5)
    r = u - 0.25 * q
    high, low = TWO_PI_HI * r, TWO_PI_LO * r
    a = high + low
    y = low - (a - high)                                       # a + y = high + low exactly (fast two-sum)
    z = a * a
    w = z * z
    c = z * (COS_C[0] + z * (COS_C[1] + z * COS_C[2])) + w * w * (COS_C[3] + z * (COS_C[4] + z * COS_C[5]))
    hz = 0.5 * z
    one = 1.0 - hz
    cos = one + (((1.0 - one) - hz) + (z * c - a * y))
    s = SIN_S[1] + z * (SIN_S[2] + z * SIN_S[3]) + z * w * (SIN_S[4] + z * SIN_S[5])
    v = z * a
    sin = a - ((z * (0.5 * y - v * s) - y) - v * SIN_S[0])
    turn = q.astype(np.int64) % 4
    return np.select([turn == 0, turn == 1, turn == 2], [cos, -sin, -cos], sin)


def normals(seed: int, stream: int, count: int) -> np.ndarray:
    """z_k = sqrt(-2 log u_2k) cos(2 pi u_2k+1), standard normal, float64 (log and cos as the browser computes
    them: box_muller_log, cos_turns)."""
    u = uniforms(seed, stream, 2 * count)
    return np.sqrt(-2.0 * box_muller_log(u[0::2])) * cos_turns(u[1::2])


def normal(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor of standard normals from stream `name`, row-major."""
    return normals(seed, STREAMS[name], math.prod(shape)).reshape(shape)


def linear(seed: int, name: str, shape: tuple[int, int]) -> np.ndarray:
    """A Linear layer's weight (out, in), uniform on (-1/sqrt(in), 1/sqrt(in)) as torch's default init draws it."""
    return (2.0 * uniforms(seed, STREAMS[name], math.prod(shape)) - 1.0).reshape(shape) / math.sqrt(shape[1])
