"""Language-model data and tokenizers: Hub streaming (offline, on local json through `datasets`),
local SlimPajama shards (.jsonl, .jsonl.zst), the demo corpus, packing, and the tokenizers.
Every test builds its own tiny data; nothing touches the network."""
import hashlib
import json
import random
import subprocess
import sys
from itertools import islice
from pathlib import Path

import pytest
import torch
import zstandard
from conftest import child_env

from cem_core.experiments.lm import (
    DEMO_LABEL,
    BPETokenizer,
    ByteTokenizer,
    DataConfig,
    DataStats,
    batches,
    describe,
    iter_documents,
    load_tokenizer,
    pack_blocks,
    stream_hub_documents,
    train_bpe,
    validation_blocks,
)
from cem_core.experiments.lm.stdlib_corpus import DEMO_SKIPPED_DIRS, _stdlib_modules, demo_corpus, stdlib_root
from cem_core.experiments.lm.tokenizer import first_bytes

TRICKY = [
    "",
    "plain ASCII, with  two spaces\tand a tab\n",
    "emoji 👩‍💻🎉🇫🇷 and a skin tone 👍🏽",
    "CJK 漢字かな交じり文 한국어 中文",
    "combining marks: e\u0301 a\u0308 n\u0303 \u0915\u094d\u0937",
    "right to left: שלום مرحبا",
    "control \x00\x01 \r\n and U+2028\u2028 and U+FFFF\uffff and U+10FFFF\U0010ffff",
    "a literal <|endoftext|> inside a document",
]


def _random_unicode(rng: random.Random, n: int) -> str:
    """Random code points from every plane, surrogates excluded (they are not text)."""
    points = (rng.randrange(0x110000) for _ in range(n))
    return "".join(chr(p) for p in points if not 0xD800 <= p <= 0xDFFF)


def _hash_unit(text: str) -> float:
    """The documented split rule, computed independently: blake2b-64 of the UTF-8 text."""
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big") / 2.0 ** 64


def _record(text, set_name="RedPajamaC4") -> str:
    return json.dumps({"text": text, "meta": {"redpajama_set_name": set_name}})


def _write_shard(path: Path, lines: list) -> Path:
    """Lines (str or raw bytes) to a .jsonl, or a streamed (size-less) zstd frame for .zst."""
    data = b"".join((line if isinstance(line, bytes) else line.encode()) + b"\n" for line in lines)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".zst"):
        with open(path, "wb") as fh, zstandard.ZstdCompressor().stream_writer(fh) as writer:
            writer.write(data)
    else:
        path.write_bytes(data)
    return path


def _texts(prefix: str, n: int) -> list[str]:
    return [f"{prefix} document {i}: " + "words " * (i % 7) for i in range(n)]


def _local(path, **kw) -> DataConfig:
    return DataConfig(source="path", path=str(path), **kw)


# --- (a) the datasets streaming code path, offline -------------------------------------------

@pytest.mark.slow                       # imports Hugging Face datasets
@pytest.mark.parametrize("n_train_files", [1, 2])   # 1: split by examples; 2: split by shards
def test_hub_streaming_path_on_local_json(tmp_path, n_train_files):
    train = _texts("train", 24)
    per_file = len(train) // n_train_files
    train_files = [str(_write_shard(tmp_path / f"train{f}.jsonl",
                                    [_record(t) for t in train[f * per_file:(f + 1) * per_file]]))
                   for f in range(n_train_files)]
    validation = _texts("validation", 5)
    val_file = _write_shard(tmp_path / "validation.jsonl",
                            [_record(t, "RedPajamaWikipedia") for t in validation]
                            + [json.dumps({"meta": {"redpajama_set_name": "RedPajamaC4"}})])
    files = {"train": train_files, "validation": [str(val_file)]}
    config = DataConfig(source="slimpajama")

    assert list(stream_hub_documents(config, "train", data_files=files)) == train
    stats = DataStats()
    assert list(stream_hub_documents(config, "validation", stats=stats, data_files=files)) == validation
    assert (stats.documents, stats.malformed, stats.filtered) == (5, 1, 0)

    parts = [list(stream_hub_documents(config, "train", rank, 2, data_files=files)) for rank in range(2)]
    assert all(parts) and not set(parts[0]) & set(parts[1])
    assert sorted(parts[0] + parts[1]) == sorted(train)

    wiki_only = DataConfig(source="slimpajama", source_filter=("RedPajamaWikipedia",))
    stats = DataStats()
    assert list(stream_hub_documents(wiki_only, "train", stats=stats, data_files=files)) == []
    assert (stats.documents, stats.filtered) == (0, len(train))


@pytest.mark.slow                       # imports Hugging Face datasets
def test_hub_streaming_without_validation_split_holds_out_by_hash(tmp_path):
    docs = _texts("only train", 60)
    files = {"train": [str(_write_shard(tmp_path / "train.jsonl", [_record(t) for t in docs]))]}
    config = DataConfig(source="slimpajama", validation_fraction=0.3)
    train = list(stream_hub_documents(config, "train", data_files=files))
    validation = list(stream_hub_documents(config, "validation", data_files=files))
    assert validation == [t for t in docs if _hash_unit(t) < 0.3]
    assert train == [t for t in docs if _hash_unit(t) >= 0.3]
    assert train and validation


@pytest.mark.slow
def test_unreachable_hub_names_the_local_shard_option(tmp_path):
    """datasets and huggingface_hub read HF_HUB_OFFLINE when they are imported, so the check runs
    in a fresh interpreter with the variable set: no request is attempted at all."""
    script = ("from cem_core.experiments.lm import DataConfig, iter_documents\n"
              "config = DataConfig(source='slimpajama', dataset_id='cem-lab-tests/no-such-dataset')\n"
              "try:\n"
              "    iter_documents(config, 'train')\n"
              "except ConnectionError as err:\n"
              "    print('MESSAGE', err)\n")
    env = child_env(HF_HUB_OFFLINE="1", HF_HOME=str(tmp_path / "hf"))    # no cached copy can answer
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    message = done.stdout.split("MESSAGE", 1)[1]
    assert "cem-lab-tests/no-such-dataset" in message
    assert "--data PATH" in message and "*.jsonl.zst" in message
    assert "Retrying" not in done.stderr


# --- (b) local shards ------------------------------------------------------------------------

def test_local_jsonl_and_zst_shards_with_hash_split(tmp_path):
    first, second, nested = _texts("plain", 20), _texts("zstd ü 漢", 20), _texts("nested", 20)
    _write_shard(tmp_path / "b.jsonl.zst", [_record(t) for t in second])
    _write_shard(tmp_path / "a.jsonl", [_record(t) for t in first])
    _write_shard(tmp_path / "c" / "d.jsonl.zst", [_record(t) for t in nested])
    (tmp_path / "notes.txt").write_text("not a shard\n")
    everything = first + second + nested                        # sorted paths: a, b, c/d
    config = _local(tmp_path, validation_fraction=0.25)
    assert list(iter_documents(config, "validation")) == [t for t in everything if _hash_unit(t) < 0.25]
    assert list(iter_documents(config, "train")) == [t for t in everything if _hash_unit(t) >= 0.25]

    one_file = _local(tmp_path / "b.jsonl.zst", validation_fraction=0.25)
    both = list(iter_documents(one_file, "train")) + list(iter_documents(one_file, "validation"))
    assert sorted(both) == sorted(second)


def test_train_and_validation_folders_give_the_splits(tmp_path):
    train = {f"train/chunk{c}/example_train_{i}.jsonl.zst": _texts(f"c{c} f{i}", 6)
             for c in (1, 2) for i in (0, 1)}
    validation = {"validation/chunk1/example_validation_0.jsonl.zst": _texts("val", 6)}
    for name, texts in {**train, **validation}.items():
        _write_shard(tmp_path / name, [_record(t) for t in texts])
    config = _local(tmp_path, validation_fraction=0.5)          # a hash split would drop about half
    assert list(iter_documents(config, "train")) == [t for name in sorted(train) for t in train[name]]
    assert list(iter_documents(config, "validation")) == _texts("val", 6)


@pytest.mark.parametrize("world_size", [2, 3])
def test_local_record_k_goes_to_rank_k_mod_world_size(tmp_path, world_size):
    docs = _texts("rank", 17)
    _write_shard(tmp_path / "train" / "0.jsonl", [_record(t) for t in docs[:9]])
    _write_shard(tmp_path / "train" / "1.jsonl.zst", [_record(t) for t in docs[9:]])
    _write_shard(tmp_path / "validation" / "0.jsonl", [_record("v")])
    config = _local(tmp_path)
    parts = [list(iter_documents(config, "train", rank, world_size)) for rank in range(world_size)]
    assert parts == [docs[rank::world_size] for rank in range(world_size)]


def test_source_filter_keeps_only_the_named_sets(tmp_path):
    lines = [_record("wiki 1", "RedPajamaWikipedia"), _record("c4 1", "RedPajamaC4"),
             json.dumps({"text": "no meta"}), _record("book 1", "RedPajamaBook"),
             json.dumps({"text": "meta not an object", "meta": "RedPajamaWikipedia"}),
             _record("wiki 2", "RedPajamaWikipedia")]
    _write_shard(tmp_path / "train" / "x.jsonl", lines)
    _write_shard(tmp_path / "validation" / "x.jsonl", [_record("v")])
    stats = DataStats()
    config = _local(tmp_path, source_filter=("RedPajamaWikipedia", "RedPajamaBook"))
    assert list(iter_documents(config, "train", stats=stats)) == ["wiki 1", "book 1", "wiki 2"]
    assert (stats.documents, stats.malformed, stats.filtered) == (3, 0, 3)


@pytest.mark.parametrize("name", ["shard.jsonl", "shard.jsonl.zst"])
def test_malformed_lines_are_skipped_and_counted_exactly(tmp_path, name):
    good = _texts("good", 12)
    bad = ["not json at all", '{"text": 5}', '{"meta": {}}', "[1, 2]", '"a string"', "null",
           b'{"text": "bad utf-8 \xff\xfe"}', '{"text": "truncated', '{"text": null}']
    lines = [line for pair in zip(good, bad + [""] * 3) for line in (_record(pair[0]), pair[1])]
    lines = [line for line in lines if line != ""] + ["", "   "]   # blank lines are not records
    _write_shard(tmp_path / name, lines)
    config = _local(tmp_path / name, validation_fraction=0.3)

    train_stats, val_stats = DataStats(), DataStats()
    train = list(iter_documents(config, "train", stats=train_stats))
    validation = list(iter_documents(config, "validation", stats=val_stats))
    assert sorted(train + validation) == sorted(good)
    assert train_stats.malformed == val_stats.malformed == len(bad)
    assert (train_stats.documents, val_stats.documents) == (len(train), len(validation))

    per_rank = [DataStats() for _ in range(2)]
    for rank, stats in enumerate(per_rank):
        list(iter_documents(config, "train", rank, 2, stats=stats))
    assert sum(s.malformed for s in per_rank) == len(bad)
    assert sum(s.documents for s in per_rank) == len(train)


# --- (c) the demo corpus ---------------------------------------------------------------------

def test_demo_corpus_is_deterministic_labelled_and_split():
    config = DataConfig(source="demo", demo_max_bytes=300_000, validation_fraction=0.05)
    corpus = demo_corpus(config.demo_max_bytes)
    demo_corpus.cache_clear()
    assert demo_corpus(config.demo_max_bytes) == corpus
    assert len(corpus) > 5 and all(doc.strip() for doc in corpus)
    assert 299_990 < sum(len(doc.encode()) for doc in corpus) <= 300_000   # the stdlib is larger: cut
    assert "not SlimPajama" in DEMO_LABEL and DEMO_LABEL in describe(config)
    assert "SlimPajama" not in describe(config).replace("not SlimPajama", "")

    root = stdlib_root()
    modules = _stdlib_modules(root)
    assert modules == sorted(modules, key=lambda p: p.relative_to(root).as_posix())
    assert not any(DEMO_SKIPPED_DIRS & set(p.relative_to(root).parts) for p in modules)
    assert corpus[0] == modules[0].read_text(encoding="utf-8")

    train, validation = list(iter_documents(config, "train")), list(iter_documents(config, "validation"))
    assert train and validation and not set(train) & set(validation)
    assert set(train) | set(validation) == set(corpus)
    parts = [list(iter_documents(config, "validation", rank, 2)) for rank in range(2)]
    assert parts == [validation[0::2], validation[1::2]]


# --- tokenizers --------------------------------------------------------------------------------

def test_byte_tokenizer_round_trips_any_unicode():
    tokenizer = ByteTokenizer()
    assert (tokenizer.vocab_size, tokenizer.eot_id) == (257, 256)
    rng = random.Random(0)
    for text in TRICKY + [_random_unicode(rng, 200) for _ in range(20)]:
        ids = tokenizer.encode(text)
        assert all(0 <= i < 256 for i in ids) and len(ids) == len(text.encode())
        assert tokenizer.decode(ids) == text
        assert tokenizer.decode([tokenizer.eot_id] + ids + [tokenizer.eot_id]) == text
    assert tokenizer.decode([0xE6, 0xBC]) == "\ufffd"                   # a cut character is replaced


def test_bpe_trains_round_trips_and_saves_identically(tmp_path):
    corpus = [f"def function_{i}(x):\n    return x * {i} + the_value  # the comment\n" for i in range(200)]
    tokenizer = train_bpe(corpus, vocab_size=400, max_bytes=20_000)
    assert 257 < tokenizer.vocab_size <= 400 and tokenizer.decode([tokenizer.eot_id]) == ""
    assert len(tokenizer.encode(corpus[0])) < len(corpus[0].encode()) / 2   # merges were learned
    rng = random.Random(1)
    texts = TRICKY + corpus[:3] + [_random_unicode(rng, 100) for _ in range(10)]
    for text in texts:
        ids = tokenizer.encode(text)
        assert tokenizer.decode(ids) == text and tokenizer.eot_id not in ids

    tokenizer.save(tmp_path / "tokenizer.json")
    for loaded in (load_tokenizer(tmp_path / "tokenizer.json"), load_tokenizer(str(tmp_path))):
        assert isinstance(loaded, BPETokenizer)
        assert (loaded.vocab_size, loaded.eot_id, loaded.name) == (tokenizer.vocab_size, tokenizer.eot_id,
                                                                   tokenizer.name)
        assert [loaded.encode(t) for t in texts] == [tokenizer.encode(t) for t in texts]
    assert isinstance(load_tokenizer("bytes"), ByteTokenizer)


def test_bpe_training_reads_only_the_first_max_bytes():
    docs = ["ab" * 10, "漢字" * 10, "tail"]
    taken = list(first_bytes(docs, 27))                                # 20 + 7 bytes: 2 whole 漢/字
    assert taken == ["ab" * 10, "漢字"]
    assert list(first_bytes(docs, 10_000)) == docs


# --- packing ---------------------------------------------------------------------------------

def test_packing_gives_blocks_of_exactly_seq_len_plus_one(tmp_path):
    tokenizer = ByteTokenizer()
    docs = ["hello", "", "wörld 🎉", "x" * 40]
    stream = [i for doc in docs for i in tokenizer.encode(doc) + [tokenizer.eot_id]]
    blocks = list(pack_blocks(docs, tokenizer, 9))
    assert all(len(block) == 9 for block in blocks)
    assert sum(blocks, []) == stream[:len(stream) // 9 * 9]

    _write_shard(tmp_path / "train" / "t.jsonl", [_record(t) for t in _texts("pack", 30)])
    _write_shard(tmp_path / "validation" / "v.jsonl", [_record(t) for t in _texts("val", 10)])
    config = _local(tmp_path)
    first_pass = list(batches(config, tokenizer, "validation", seq_len=16, batch_size=3))
    assert first_pass and all(b.shape == (3, 17) and b.dtype == torch.long for b in first_pass)
    blocks = validation_blocks(config, tokenizer, seq_len=16, n_blocks=4)
    assert torch.equal(blocks, torch.cat(first_pass)[:4])

    one_pass = list(batches(config, tokenizer, "validation", seq_len=16, batch_size=3))
    assert [b.tolist() for b in one_pass] == [b.tolist() for b in first_pass]   # deterministic
    train = batches(config, tokenizer, "train", seq_len=16, batch_size=4)
    n_per_pass = len(list(pack_blocks(iter_documents(config, "train"), tokenizer, 17))) // 4
    many = list(islice(train, 2 * n_per_pass + 1))                    # train repeats pass after pass
    assert len(many) == 2 * n_per_pass + 1 and torch.equal(many[0], many[n_per_pass])


def test_too_little_data_is_an_error_not_a_hang(tmp_path):
    _write_shard(tmp_path / "tiny.jsonl", [_record("short")] * 3)
    config = _local(tmp_path / "tiny.jsonl", validation_fraction=0.01)
    with pytest.raises(ValueError, match="less than one batch"):
        next(batches(config, ByteTokenizer(), "train", seq_len=1000, batch_size=2))
    with pytest.raises(ValueError, match="less than one block"):
        validation_blocks(config, ByteTokenizer(), seq_len=1000, n_blocks=2)


# --- bad settings ----------------------------------------------------------------------------

BAD_CONFIGS = [
    (dict(source="web"), "source"),
    (dict(source="path"), "path"),
    (dict(source="path", path="/no/such/folder"), "path"),
    (dict(source="demo", path="."), "path"),
    (dict(dataset_id=""), "dataset_id"),
    (dict(dataset_id=None), "dataset_id"),
    (dict(source_filter="RedPajamaC4"), "source_filter"),
    (dict(source_filter=()), "source_filter"),
    (dict(source_filter=("RedPajamaC4", "")), "source_filter"),
    (dict(validation_fraction=0.0), "validation_fraction"),
    (dict(validation_fraction=1.0), "validation_fraction"),
    (dict(validation_fraction=float("nan")), "validation_fraction"),
    (dict(demo_max_bytes=0), "demo_max_bytes"),
]


@pytest.mark.parametrize("kwargs, field", BAD_CONFIGS)
def test_bad_data_config_names_the_field(kwargs, field):
    with pytest.raises(ValueError, match=rf"^{field}=.* is invalid: "):
        DataConfig(**kwargs)


def test_bad_arguments_name_the_field(tmp_path):
    (tmp_path / "readme.txt").write_text("x")
    (tmp_path / "empty").mkdir()
    config = DataConfig(source="demo", demo_max_bytes=10_000)
    tok = ByteTokenizer()
    cases = [
        (lambda: DataConfig(source="path", path=str(tmp_path / "readme.txt")), "path"),
        (lambda: iter_documents(_local(tmp_path / "empty"), "train"), "path"),
        (lambda: iter_documents(config, "test"), "split"),
        (lambda: iter_documents(config, "train", rank=2, world_size=2), "rank"),
        (lambda: iter_documents(config, "train", rank=0, world_size=0), "world_size"),
        (lambda: batches(config, tok, "train", seq_len=0, batch_size=2), "seq_len"),
        (lambda: batches(config, tok, "train", seq_len=8, batch_size=0), "batch_size"),
        (lambda: validation_blocks(config, tok, seq_len=8, n_blocks=0), "n_blocks"),
        (lambda: train_bpe(["text"], vocab_size=256, max_bytes=100), "vocab_size"),
        (lambda: train_bpe(["text"], vocab_size=300, max_bytes=0), "max_bytes"),
        (lambda: load_tokenizer("gpt2"), "tokenizer"),
    ]
    for call, field in cases:
        with pytest.raises(ValueError, match=rf"^{field}=.* is invalid: "):
            call()
