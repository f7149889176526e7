"""The one seeded generator of the energy page's random state: its input h and every layer's weights.

JavaScript reproduces it bit for bit (cem_core/web/explore.js, ``seeded``; tested in Chromium), so the browser
builds the same state as ``cem_core.ui.explore`` from the controls alone. It is counter based, in unsigned 32-bit
arithmetic that both languages compute exactly:

    start(seed, stream) = fmix32(fmix32(seed) xor (stream + 1) * 0x9E3779B9)        (murmur3's finalizer)
    bits_k              = mulberry32(start + (k + 1) * 0x6D2B79F5)                  (its output function)
    u_k                 = (bits_k + 1/2) / 2^32                                      in (0, 1)
    z_k                 = sqrt(-2 log u_2k) cos(2 pi u_2k+1)                        (Box-Muller, one of the pair)

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


def normals(seed: int, stream: int, count: int) -> np.ndarray:
    """z_k = sqrt(-2 log u_2k) cos(2 pi u_2k+1), standard normal, float64.

    log and cos are the C library's (``math``), as the browsers' Math.log and Math.cos compute them: numpy's own
    vectorized log differs from it in the last bit for some inputs on some CPUs (0.16 % of the tests' normals
    here), which would make the state depend on the machine."""
    u = uniforms(seed, stream, 2 * count)
    logs = np.fromiter(map(math.log, u[0::2]), np.float64, count)
    cosines = np.fromiter(map(math.cos, 2.0 * math.pi * u[1::2]), np.float64, count)
    return np.sqrt(-2.0 * logs) * cosines


def normal(seed: int, name: str, shape: tuple[int, ...]) -> np.ndarray:
    """A tensor of standard normals from stream `name`, row-major."""
    return normals(seed, STREAMS[name], math.prod(shape)).reshape(shape)


def linear(seed: int, name: str, shape: tuple[int, int]) -> np.ndarray:
    """A Linear layer's weight (out, in), uniform on (-1/sqrt(in), 1/sqrt(in)) as torch's default init draws it."""
    return (2.0 * uniforms(seed, STREAMS[name], math.prod(shape)) - 1.0).reshape(shape) / math.sqrt(shape[1])
