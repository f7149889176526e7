"""Documents packed into fixed-length token blocks, and the batches a run trains and validates on.

Packing: each document's ids followed by the end-of-text id form one stream, cut into
consecutive blocks of seq_len + 1 ids (inputs block[:-1], targets block[1:]); an incomplete
last block or batch is dropped. `batches` over "train" repeats the data forever (pass after
pass, the same order each time, or with `order` = k each pass's documents shuffled by a seeded
buffer of SHUFFLE_BUFFER documents, drawn anew per pass); over "validation" it makes one pass. Everything is
deterministic, so a resumed run skips the batches it has consumed
(`itertools.islice(batches(...), step, None)`). Each rank gets different documents: to compare
a multi-process run with one process on the same global batch, build that batch with
world_size=1 and give rank r its rows r::world_size.
"""
from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from functools import partial
from itertools import count, islice

import torch

from cem_core.experiments.integrity import json_hash
from cem_core.nn.validate import check_choice, check_int, fail

from .data_config import SPLITS, DataConfig, DataStats, check_rank
from .sources import describe, iter_documents
from .tokenizer import Tokenizer


def pack_blocks(documents: Iterable[str], tokenizer: Tokenizer, block_len: int) -> Iterator[list[int]]:
    """Consecutive blocks of `block_len` ids from the documents joined by end-of-text (each
    document is followed by eot_id); the incomplete tail is dropped."""
    check_int("block_len", block_len, 2)
    buffer: list[int] = []
    for doc in documents:
        buffer.extend(tokenizer.encode(doc))
        buffer.append(tokenizer.eot_id)
        start = 0
        while len(buffer) - start >= block_len:
            yield buffer[start:start + block_len]
            start += block_len
        del buffer[:start]


SHUFFLE_BUFFER = 4096                    # documents held to shuffle a pass (the demo corpus: 609 in all)


def shuffled(documents: Iterable[str], seed: int, buffer: int = SHUFFLE_BUFFER) -> Iterator[str]:
    """The documents in a seeded random order: a buffer of `buffer` documents, each next one drawn
    from it at random and replaced by the next document read (a full permutation when the
    documents fit in the buffer). The same seed gives the same order, so a resumed run replays it."""
    check_int("buffer", buffer, 1)
    rng = random.Random(seed)
    held: list[str] = []
    for doc in documents:
        held.append(doc)
        if len(held) == buffer:
            k = rng.randrange(buffer)
            held[k], held[-1] = held[-1], held[k]
            yield held.pop()
    rng.shuffle(held)
    yield from held


def batches(config: DataConfig, tokenizer: Tokenizer, split: str, seq_len: int, batch_size: int,
            rank: int = 0, world_size: int = 1, stats: DataStats | None = None,
            order: int | None = None) -> Iterator[torch.Tensor]:
    """LongTensors (batch_size, seq_len + 1) of this rank's blocks: forever (pass after pass)
    for "train", one pass for "validation". `stats` counts the first pass only, so each record
    read is counted once however long a run trains. `order` (train only): None keeps the
    documents' own order; k shuffles each pass p's documents with the seed (k, p, rank)."""
    check_int("seq_len", seq_len, 1)
    check_int("batch_size", batch_size, 1)
    check_choice("split", split, SPLITS)
    check_rank(rank, world_size)
    if order is not None:
        check_int("order", order, 0)
        if split == "validation":
            fail("order", order, "applies to the train split only (validation keeps one fixed order)")
    one_pass = partial(_batch_pass, config, tokenizer, split, seq_len, batch_size, rank, world_size, order)
    return one_pass(stats) if split == "validation" else _repeat(one_pass, stats, config, seq_len, batch_size)


def _batch_pass(config: DataConfig, tokenizer: Tokenizer, split: str, seq_len: int, batch_size: int,
                rank: int, world_size: int, order: int | None, stats: DataStats | None,
                pass_index: int = 0) -> Iterator[torch.Tensor]:
    docs = iter_documents(config, split, rank, world_size, stats)
    if order is not None:
        docs = shuffled(docs, seed=json_hash([order, pass_index, rank]))
    group: list[list[int]] = []
    for block in pack_blocks(docs, tokenizer, seq_len + 1):
        group.append(block)
        if len(group) == batch_size:
            yield torch.tensor(group, dtype=torch.long)
            group = []


def _repeat(one_pass, stats: DataStats | None, config: DataConfig, seq_len: int,
            batch_size: int) -> Iterator[torch.Tensor]:
    stats = DataStats() if stats is None else stats
    for pass_index in count():
        empty = True
        for batch in one_pass(stats, pass_index):
            empty = False
            yield batch
        if empty:
            raise ValueError(f"the train split of {describe(config)} holds less than one batch "
                             f"of {batch_size} x {seq_len + 1} tokens for this rank (read: {stats.summary()})")
        stats = None                     # later passes read the same records again


def validation_blocks(config: DataConfig, tokenizer: Tokenizer, seq_len: int, n_blocks: int,
                      rank: int = 0, world_size: int = 1, stats: DataStats | None = None) -> torch.Tensor:
    """A fixed validation set: the first `n_blocks` blocks (fewer if the split is smaller) of
    this rank's validation documents, LongTensor (n, seq_len + 1). `stats` counts the records
    read to make them."""
    check_int("seq_len", seq_len, 1)
    check_int("n_blocks", n_blocks, 1)
    stats = DataStats() if stats is None else stats
    docs = iter_documents(config, "validation", rank, world_size, stats)
    blocks = list(islice(pack_blocks(docs, tokenizer, seq_len + 1), n_blocks))
    if not blocks:
        raise ValueError(f"the validation split of {describe(config)} holds less than one block "
                         f"of {seq_len + 1} tokens for this rank (read: {stats.summary()})")
    return torch.tensor(blocks, dtype=torch.long)
