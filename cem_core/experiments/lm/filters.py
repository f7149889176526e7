"""Records to documents, the same for every source: which records are documents, and which split each falls in.

Optionally only records whose meta.redpajama_set_name is in `source_filter` are kept. Malformed
records (bad JSON or UTF-8, not an object, text missing or not a string, a lone surrogate) are skipped and counted
in a `DataStats` the iterator updates; blank lines are not records. So are oversized records,
longer than `max_document_bytes` (default 16 MiB): a local shard line of more bytes, whatever it
holds (`OVERSIZED`), or a text of more bytes of UTF-8.

A source without a validation split (one shard file, a folder without train/ and validation/, a Hub dataset
with only "train") holds out the documents whose stable hash (blake2b of the text, `hash_unit`) falls below
`validation_fraction`. Identical texts always land in the same split.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator

from .data_config import DataConfig, DataStats

OVERSIZED = object()            # stands for a line or record longer than max_document_bytes


def hash_unit(text: str) -> float:
    """A stable number in [0, 1) from the text (same on every machine and Python run)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2.0 ** 64


def _set_name(record: dict) -> str | None:
    meta = record.get("meta")
    return meta.get("redpajama_set_name") if isinstance(meta, dict) else None


def too_long(text: str, max_bytes: int) -> bool:
    """Whether `text` takes more than `max_bytes` bytes of UTF-8, encoding it only when its length
    leaves a doubt (a code point takes 1 to 4 bytes; a lone surrogate, which JSON allows, 3)."""
    if 4 * len(text) <= max_bytes:
        return False
    if len(text) > max_bytes:
        return True
    return len(text.encode("utf-8", "surrogatepass")) > max_bytes


def _is_text(text: str) -> bool:
    """False for a string holding a lone surrogate (JSON's \\ud800 escape allows one): not text."""
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def select_texts(records: Iterable[object], config: DataConfig, split: str, hash_split: bool,
            stats: DataStats) -> Iterator[str]:
    """The texts of well-formed records that pass the source filter and, with `hash_split`,
    fall in `split`; malformed, oversized (a record that is OVERSIZED or whose text is too long)
    and filtered records are counted."""
    for record in records:
        text = record.get("text") if isinstance(record, dict) else None
        if record is OVERSIZED or (isinstance(text, str) and too_long(text, config.max_document_bytes)):
            stats.oversized += 1
            continue
        if not isinstance(text, str) or not _is_text(text):
            stats.malformed += 1
            continue
        if config.source_filter is not None and _set_name(record) not in config.source_filter:
            stats.filtered += 1
            continue
        if hash_split and (hash_unit(text) < config.validation_fraction) != (split == "validation"):
            continue
        stats.documents += 1
        yield text
