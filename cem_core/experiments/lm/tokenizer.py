"""Tokenizers for the language model: UTF-8 bytes by default, an optional byte-level BPE.

- `ByteTokenizer`: ids 0..255 are the UTF-8 bytes of the text and 256 is end-of-text
  (vocab_size 257). Needs no download and round-trips any Unicode text exactly.
- `BPETokenizer`: a byte-level BPE trained with the `tokenizers` library on the first
  `max_bytes` of the training documents (`train_bpe`) and saved as a tokenizer.json beside the
  run (`save` / `load`). Its end-of-text token is "<|endoftext|>"; that string inside a document
  is encoded as ordinary text, so it cannot be confused with a document boundary.

Both follow the `Tokenizer` interface: `encode(str) -> list[int]`, `decode(list[int]) -> str`
(end-of-text ids are dropped, invalid UTF-8 is replaced), `vocab_size`, `eot_id`, `name`.
`load_tokenizer("bytes" | path)` returns either.
"""
from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from cem_core.nn.validate import check_int, fail

if TYPE_CHECKING:                   # `tokenizers` (the lm extra) is imported where a BPE is made or read
    from tokenizers import Tokenizer as HFTokenizer

EOT_TOKEN = "<|endoftext|>"
MAX_VOCAB_SIZE = 1 << 20


class Tokenizer(Protocol):
    """What the data pipeline and the training loop need from a tokenizer."""

    vocab_size: int
    eot_id: int
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...


class ByteTokenizer:
    """UTF-8 bytes as ids 0..255, end-of-text 256."""

    vocab_size = 257
    eot_id = 256
    name = "bytes"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if i != self.eot_id).decode("utf-8", errors="replace")


class BPETokenizer:
    """A byte-level BPE from the `tokenizers` library with an "<|endoftext|>" special token."""

    def __init__(self, tokenizer: HFTokenizer):
        eot_id = tokenizer.token_to_id(EOT_TOKEN)
        if eot_id is None:
            raise ValueError(f"this BPE tokenizer has no {EOT_TOKEN!r} token: train it with train_bpe")
        tokenizer.encode_special_tokens = True    # not saved in tokenizer.json: set on every load
        self._tokenizer = tokenizer
        self.eot_id = eot_id
        self.vocab_size = tokenizer.get_vocab_size(with_added_tokens=True)
        self.name = f"bpe-{self.vocab_size}"

    def encode(self, text: str) -> list[int]:
        return self._tokenizer.encode(text).ids

    def decode(self, ids: Sequence[int]) -> str:
        return self._tokenizer.decode(list(ids), skip_special_tokens=True)

    def save(self, path: str | Path) -> None:
        """Write tokenizer.json (the whole tokenizer: vocabulary, merges, pre-tokenizer)."""
        self._tokenizer.save(str(path))

    @classmethod
    def load(cls, path: str | Path) -> BPETokenizer:
        from tokenizers import Tokenizer as HFTokenizer

        return cls(HFTokenizer.from_file(str(path)))


def train_bpe(documents: Iterable[str], vocab_size: int, max_bytes: int) -> BPETokenizer:
    """Train a byte-level BPE of at most `vocab_size` ids (the 256 byte symbols, end-of-text and
    merges) on the documents' first `max_bytes` bytes of UTF-8. A small corpus may end with
    fewer ids than asked for: read `vocab_size` from the result."""
    check_int("vocab_size", vocab_size, 257, MAX_VOCAB_SIZE)
    check_int("max_bytes", max_bytes, 1)
    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tokenizer = HFTokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[EOT_TOKEN],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tokenizer.train_from_iterator(first_bytes(documents, max_bytes), trainer)
    return BPETokenizer(tokenizer)


def first_bytes(documents: Iterable[str], max_bytes: int) -> Iterator[str]:
    """The documents up to a total of `max_bytes` UTF-8 bytes, the last one cut to fit (at a
    character boundary)."""
    left = max_bytes
    for doc in documents:
        data = doc.encode("utf-8")
        if len(data) >= left:
            cut = data[:left].decode("utf-8", errors="ignore")
            if cut:
                yield cut
            return
        left -= len(data)
        yield doc


def load_tokenizer(spec: str | Path) -> Tokenizer:
    """"bytes" gives the ByteTokenizer; a tokenizer.json (or a folder holding one) saved by
    BPETokenizer.save gives that BPE."""
    if spec == "bytes":
        return ByteTokenizer()
    path = Path(spec)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        fail("tokenizer", str(spec), "must be 'bytes' or the path of a tokenizer.json saved by "
              "BPETokenizer.save (or of the folder holding it)")
    return BPETokenizer.load(path)
