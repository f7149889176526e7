"""Language-model data settings: `DataConfig` (where the documents come from, validated at construction),
`DataStats` (the readers' counts of what they yielded and skipped) and the names every source shares.

Sources (`DataConfig.source`): "slimpajama" streams a Hugging Face dataset (`hub`), "path" reads local
SlimPajama shards (`shards`), "demo" and "prose" are built from the Python installation (`stdlib_corpus`);
`sources.iter_documents` reads any of them. Splits are "train" and "validation".
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from cem_core.experiments.records import and_list
from cem_core.nn.validate import check_choice, check_float, check_int, fail

SOURCES = ("demo", "prose", "slimpajama", "path")
INSTALLED = ("demo", "prose")   # the corpora built from the Python installation: no download, no files
SPLITS = ("train", "validation")
DEFAULT_DATASET_ID = "DKYoon/SlimPajama-6B"
DEFAULT_MAX_DOCUMENT_BYTES = 16 * 2 ** 20
SHARD_SUFFIXES = (".jsonl", ".jsonl.zst")


@dataclass(frozen=True, kw_only=True)
class DataConfig:
    """Where the documents come from; validated at construction (ValueError names the field)."""

    source: str = "demo"                         # "demo" | "prose" | "slimpajama" | "path"
    path: str | None = None                      # source="path": a shard file or a folder of shards
    dataset_id: str = DEFAULT_DATASET_ID         # source="slimpajama": the Hub dataset
    source_filter: tuple[str, ...] | None = None  # keep only these redpajama_set_name; None = all
    validation_fraction: float = 0.01            # held out where a source has no validation split
    demo_max_bytes: int = 4_000_000              # source="demo" or "prose": size cap of the corpus
    # Longer records are skipped and counted, never held in memory. 16 MiB is far above ordinary
    # documents (a long novel is about 1 MB of UTF-8) while bounding what one record costs
    # downstream: its str, JSON parse and token list take some 10-30x its bytes, hundreds of MB.
    max_document_bytes: int = DEFAULT_MAX_DOCUMENT_BYTES

    def __post_init__(self) -> None:
        check_choice("source", self.source, SOURCES)
        if self.source == "path":
            _check_shard_path(self.path)
        elif self.path is not None:
            fail("path", self.path, f"is only used with source='path' (source={self.source!r})")
        if not isinstance(self.dataset_id, str) or not self.dataset_id.strip():
            fail("dataset_id", self.dataset_id, "must be a non-empty Hugging Face dataset id")
        if self.source_filter is not None:
            names = self.source_filter
            if (isinstance(names, str) or not isinstance(names, (tuple, list)) or not names
                    or not all(isinstance(n, str) and n for n in names)):
                fail("source_filter", names, "must be None or a non-empty tuple of redpajama set "
                      "names, e.g. ('RedPajamaWikipedia',)")
            object.__setattr__(self, "source_filter", tuple(names))
        check_float("validation_fraction", self.validation_fraction, 0.0, strict=True)
        if self.validation_fraction >= 1:
            fail("validation_fraction", self.validation_fraction, "must be in (0, 1)")
        check_int("demo_max_bytes", self.demo_max_bytes, 1, 1 << 30)
        check_int("max_document_bytes", self.max_document_bytes, 1, 1 << 31)


def _check_shard_path(path) -> None:
    if not isinstance(path, str) or not path:
        fail("path", path, "must name a shard file or a folder of shards with source='path'")
    p = Path(path)
    if not p.exists():
        fail("path", path, "no such file or folder")
    if p.is_file() and not p.name.endswith(SHARD_SUFFIXES):
        fail("path", path, "a shard file must end in .jsonl or .jsonl.zst")


@dataclass
class DataStats:
    """Counts kept by the document iterators over the records this rank reads; summing the
    ranks' stats gives the totals. `malformed`, `oversized` and `filtered` count records of
    either split (under a hash split every record is read before its split is known),
    `documents` only those yielded."""

    documents: int = 0   # documents yielded
    malformed: int = 0   # records skipped: bad JSON or UTF-8, not an object, text missing/not a string/not text
    oversized: int = 0   # records skipped for exceeding max_document_bytes
    filtered: int = 0    # well-formed records dropped by source_filter

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def summary(self) -> str:
        """E.g. "1,234 documents; 3 malformed, 1 oversized and 40 filtered records skipped"."""
        counts = {"malformed": self.malformed, "oversized": self.oversized, "filtered": self.filtered}
        skipped = [f"{n:,} {kind}" for kind, n in counts.items() if n]
        documents = f"{self.documents:,} document{'' if self.documents == 1 else 's'}"
        if not skipped:
            return f"{documents}; no records skipped"
        records = "record" if sum(counts.values()) == 1 else "records"
        return f"{documents}; {and_list(skipped)} {records} skipped"


def check_rank(rank: int, world_size: int) -> None:
    """A rank and world size checked (ValueError names the field): world_size >= 1, 0 <= rank < world_size."""
    check_int("world_size", world_size, 1)
    check_int("rank", rank, 0, world_size - 1)
