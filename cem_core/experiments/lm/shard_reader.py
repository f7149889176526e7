"""A shard's bytes and lines: read in pieces, zstd frames decoded in bounded memory, long lines dropped.

A .jsonl.zst is decompressed as it is read, its concatenated zstd frames in turn (windows up to 2^27 bytes,
`zstd --long`'s default: a frame asking for more is refused with a message, since decoding it holds its window,
a gigabyte or two for a file of a few kilobytes); one that is empty, ends mid-frame (a cut download) or does not
decode raises ValueError naming the file, the compressed byte where it failed and the lines read before. A long
line is never held whole: its bytes are dropped as they are read, so reading a shard holds at most
max_document_bytes plus one decompressed piece (at most 16 MiB). `sha256_read_whole` reads a shard to its end
the same way, for the whole-shard check (`shard_cache`).
"""
from __future__ import annotations

import hashlib
import io
import re
from collections.abc import Iterable, Iterator
from functools import partial
from pathlib import Path

from cem_core.nn.validate import fail

from .filters import OVERSIZED

READ_BYTES = 2 ** 20            # shard bytes read from disk at a time
# Compressed bytes given to the zstd decompressor at a time. zstd expands at most 32,768-fold (a
# 4-byte RLE block gives 128 KiB), so one call yields at most 16 MiB, whatever the file holds.
ZSTD_FEED_BYTES = 512
# The largest window a frame may ask for: `zstd --long`'s default. Decoding a frame holds its window, so a frame
# written with --long=31 costs 2 GiB of memory however small the file; such a shard is refused with a message.
ZSTD_MAX_WINDOW = 2 ** 27
BLANK_RUN = re.compile(rb"\n\s*\n")   # blank lines between two line ends: dropped before a piece is split


class _BadStream(Exception):
    """A compressed stream that is empty, ends mid-frame or does not decode (the message says
    where)."""


def shard_lines(file: Path, max_bytes: int) -> Iterator[bytearray | object]:
    """The lines of one shard, decompressed on the fly for .zst; OVERSIZED for a line longer than
    `max_bytes`. A truncated or corrupt .zst raises ValueError naming the file and the place."""
    n_lines = 0
    with _open_shard(file) as raw:
        pieces = _zstd_pieces(raw) if file.name.endswith(".zst") else _pieces(raw, READ_BYTES)
        try:
            for line in _lines(pieces, max_bytes):
                yield line
                n_lines += 1
        except _BadStream as err:
            raise _damaged(file, err, f"{n_lines:,} lines read") from err.__cause__
        except _WindowTooLarge as err:
            raise _window_message(file, err) from None


def _open_shard(file: Path) -> io.BufferedReader:
    try:
        return open(file, "rb", buffering=READ_BYTES)
    except OSError as err:
        fail("path", str(file), f"cannot be read ({err.strerror or err})")


def _damaged(file: Path, err: _BadStream, where: str) -> ValueError:
    return ValueError(f"{file} is truncated or corrupt: {err} ({where}); download or write this shard again")


def _pieces(raw: io.BufferedIOBase, size: int) -> Iterator[bytes]:
    """The file's bytes, `size` at a time."""
    return iter(partial(raw.read, size), b"")


def _zstd_pieces(raw: io.BufferedIOBase) -> Iterator[bytes]:
    """The decompressed bytes of every zstd frame in the file, in turn, in pieces of at most 16 MiB
    (see ZSTD_FEED_BYTES). Raises _BadStream where the data does not decode, where it ends
    mid-frame, or for an empty file (no frame at all)."""
    import zstandard  # the lm extra: imported where a shard is decompressed

    decompressor = zstandard.ZstdDecompressor(max_window_size=ZSTD_MAX_WINDOW)
    frame = None        # the decompressor of the frame being read; None between frames
    consumed = 0        # compressed bytes fed so far
    for feed in _pieces(raw, ZSTD_FEED_BYTES):
        consumed += len(feed)
        while feed:     # a feed may end one frame and begin the next
            if frame is None:
                frame = decompressor.decompressobj()
            try:
                piece = frame.decompress(feed)
            except zstandard.ZstdError as err:
                if "too much memory" in str(err):
                    raise _WindowTooLarge(_window_of(feed)) from None
                raise _BadStream(f"zstd finds it corrupt ({err}) on reading compressed bytes "
                                 f"{consumed - len(feed):,} to {consumed:,}") from err
            yield piece
            feed, frame = (frame.unused_data, None) if frame.eof else (b"", frame)
    if frame is not None:
        raise _BadStream(f"the zstd stream ends mid-frame after {consumed:,} compressed bytes")
    if consumed == 0:
        raise _BadStream("it is empty (0 bytes), not a zstd stream")


def _window_of(feed: bytes) -> int | None:
    """The window the frame starting in `feed` asks for (None when its header cannot be read there)."""
    import zstandard

    try:
        return zstandard.get_frame_parameters(feed).window_size
    except zstandard.ZstdError:
        return None


class _WindowTooLarge(Exception):
    """A zstd frame asks for a window larger than ZSTD_MAX_WINDOW (args: its size in bytes, or None)."""


def _window_message(file: Path, err: _WindowTooLarge) -> ValueError:
    asked = f"a window of {err.args[0] / 2 ** 20:,.0f} MiB" if err.args[0] else "a larger window"
    return ValueError(f"{file} is refused: its zstd frames ask for {asked} (written with `zstd --long=28` or more), "
                      f"and a shard may use at most {ZSTD_MAX_WINDOW // 2 ** 20} MiB (decoding holds the window in "
                      f"memory, whatever the file's size); recompress it: zstd -dc {file.name} | zstd --long=27 -o NEW")


def _lines(pieces: Iterable[bytes], max_bytes: int) -> Iterator[bytearray | object]:
    """The lines of a byte stream, newline removed; OVERSIZED stands for a line longer than
    `max_bytes`, whose bytes are dropped as they arrive, so no more than max_bytes of a line
    (besides the piece at hand) is ever held. Runs of blank lines are dropped with one C-speed pass over each
    piece (blank lines are not records), so a shard of a few hundred megabytes of newlines costs seconds, not
    minutes."""
    line = bytearray()      # the line being read
    oversized = False       # that line is already longer than max_bytes (its bytes are dropped)
    for piece in pieces:
        parts = BLANK_RUN.sub(b"\n", piece).split(b"\n")        # every part but the last ends a line
        for i, part in enumerate(parts):
            oversized = oversized or len(line) + len(part) > max_bytes
            if oversized:
                line.clear()
            else:
                line += part
            if i < len(parts) - 1:
                yield OVERSIZED if oversized else line
                line, oversized = bytearray(), False
    if line or oversized:
        yield OVERSIZED if oversized else line


def sha256_read_whole(file: Path, progress=lambda n: None) -> str:
    """The sha256 of the file's bytes, each zstd frame decoded to its end on the way; `progress(n)` after each
    n bytes read."""
    digest = hashlib.sha256()
    with _open_shard(file) as raw:
        hashing = _Hashing(raw, digest, progress)
        try:
            for _ in _zstd_pieces(hashing) if file.name.endswith(".zst") else _pieces(hashing, READ_BYTES):
                pass
        except _BadStream as err:
            raise _damaged(file, err, "found on checking the whole shard before training") from err.__cause__
        except _WindowTooLarge as err:
            raise _window_message(file, err) from None
    return digest.hexdigest()


class _Hashing:
    """A reader that feeds what it reads to a hash."""

    def __init__(self, raw: io.BufferedIOBase, digest, progress):
        self.raw, self.digest, self.progress, self.unreported = raw, digest, progress, 0

    def read(self, size: int) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        self.unreported += len(data)
        if self.unreported >= READ_BYTES or not data:          # progress a megabyte at a time, and at the end
            self.progress(self.unreported)
            self.unreported = 0
        return data
