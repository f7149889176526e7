"""SlimPajama streamed from the Hugging Face Hub (`DataConfig.source` "slimpajama").

`datasets.load_dataset(dataset_id, streaming=True)`, default "DKYoon/SlimPajama-6B" (any Hub id, e.g.
"cerebras/SlimPajama-627B"), each rank reading its part through `datasets.distributed.split_dataset_by_node`.
`stream_hub_documents` also takes local json/jsonl `data_files` through the very same code path, which is how
it is tested offline. An unreachable Hub raises `ConnectionError` naming the local-shard option.
"""
from __future__ import annotations

from collections.abc import Iterator

from cem_core.nn.validate import check_choice, fail

from .data_config import SPLITS, DataConfig, DataStats, check_rank
from .filters import select_texts

LOCAL_SHARDS_HINT = ("use local shards instead: --data PATH, where PATH is a folder of SlimPajama "
                     "*.jsonl or *.jsonl.zst shards (or one shard file), or --data demo for the "
                     "offline demo corpus (not SlimPajama)")


def stream_hub_documents(config: DataConfig, split: str, rank: int = 0, world_size: int = 1,
                         stats: DataStats | None = None, *,
                         data_files: dict[str, list[str]] | None = None) -> Iterator[str]:
    """SlimPajama (config.dataset_id) streamed with `datasets`, this rank's part of `split`.

    `data_files` ({"train": [...], "validation": [...]}, json/jsonl files) streams local files
    through the same path instead of the Hub. Without a "validation" split the hash split of
    "train" is used. Raises ConnectionError naming the local-shard option when the Hub cannot
    be reached."""
    from datasets.distributed import split_dataset_by_node

    check_choice("split", split, SPLITS)
    check_rank(rank, world_size)
    stats = DataStats() if stats is None else stats
    name = "json" if data_files is not None else config.dataset_id
    splits = _load_streaming(name, data_files)
    hash_split = "validation" not in splits
    if "train" not in splits:
        fail("dataset_id", name, f"has no 'train' split (splits: {', '.join(splits)})")
    part = split_dataset_by_node(splits["train" if hash_split else split],
                                 rank=rank, world_size=world_size)
    return select_texts(_rows(part, name), config, split, hash_split, stats)


def _network_errors() -> tuple[type[Exception], ...]:
    """What `datasets`/`huggingface_hub` raise when the Hub is unreachable: ConnectionError
    (also HF_HUB_OFFLINE's OfflineModeIsEnabled), timeouts, and a cache miss in offline mode."""
    from huggingface_hub.errors import LocalEntryNotFoundError

    return ConnectionError, TimeoutError, LocalEntryNotFoundError


def _offline_error(name: str, err: Exception) -> ConnectionError:
    return ConnectionError(f"cannot stream {name!r} from the Hugging Face Hub "
                           f"({type(err).__name__}: {err}); {LOCAL_SHARDS_HINT}")


def _load_streaming(name: str, data_files: dict[str, list[str]] | None):
    """All splits of the Hub dataset `name`, or of local json `data_files` (name "json")."""
    import datasets
    from datasets.exceptions import DatasetNotFoundError

    try:
        return datasets.load_dataset(name, data_files=data_files, streaming=True)
    except _network_errors() as err:
        raise _offline_error(name, err) from err
    except DatasetNotFoundError as err:
        fail("dataset_id", name, f"not found on the Hugging Face Hub ({err})")


def _rows(dataset, name: str) -> Iterator[dict]:
    """Iterate a streaming dataset, turning a lost connection into the clear message."""
    try:
        yield from dataset
    except _network_errors() as err:
        raise _offline_error(name, err) from err
