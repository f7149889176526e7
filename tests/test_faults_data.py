"""Fault injection on the data readers: each test reproduces an attack and asserts the outcome.
Every test builds its own tiny data in tmp_path; nothing touches the network."""
import io
import json
import random
import re
import time
import tracemalloc
from itertools import islice
from pathlib import Path

import pytest
import zstandard

from cem_core.experiments.lm import (
    ByteTokenizer,
    DataConfig,
    DataStats,
    batches,
    iter_documents,
    pack_blocks,
    stream_hub_documents,
)

N_RECORDS = 2_000


def _record(text: str) -> bytes:
    return json.dumps({"text": text, "meta": {"redpajama_set_name": "RedPajamaC4"}}).encode() + b"\n"


def _texts(n: int = N_RECORDS) -> list[str]:
    """Texts of little redundancy, so that a shard of them spans several zstd blocks."""
    rng = random.Random(0)
    return [f"record {i}: {rng.randbytes(60).hex()}" for i in range(n)]


def _zstd(data: bytes, **compressor_options) -> bytes:
    """One streamed (size-less) zstd frame, as SlimPajama's shards are written."""
    out = io.BytesIO()
    with zstandard.ZstdCompressor(**compressor_options).stream_writer(out, closefd=False) as writer:
        writer.write(data)
    return out.getvalue()


def _shard(texts: list[str]) -> bytes:
    return _zstd(b"".join(_record(t) for t in texts))


def _read_all(config: DataConfig, stats: DataStats | None = None) -> list[str]:
    """Both splits, as a run reads them (a hash split reads every record for each split)."""
    return [doc for split in ("train", "validation") for doc in iter_documents(config, split, stats=stats)]


def _local(path: Path, **kw) -> DataConfig:
    return DataConfig(source="path", path=str(path), **kw)


# --- truncated and corrupt .zst shards -------------------------------------------------------

@pytest.mark.parametrize("cut", ["half", "one byte short", "just past the header"])
@pytest.mark.parametrize("layout", ["one shard", "folder"])
def test_truncated_zst_shard_is_an_error_naming_the_file(tmp_path, cut, layout):
    """A download cut short: zstandard's stream_reader used to stop silently at the end of the
    input, so a part of the shard (or nothing) was read as if it were all."""
    whole = _shard(_texts())
    keep = {"half": len(whole) // 2, "one byte short": len(whole) - 1,
            "just past the header": zstandard.frame_header_size(whole) + 1}[cut]
    shard = tmp_path / "b.jsonl.zst"
    shard.write_bytes(whole[:keep])
    if layout == "folder":
        (tmp_path / "a.jsonl.zst").write_bytes(_shard(["an intact shard read first"]))
    config = _local(shard if layout == "one shard" else tmp_path)
    with pytest.raises(ValueError, match=re.escape(f"{shard} is truncated or corrupt")) as caught:
        _read_all(config)
    message = str(caught.value)
    assert f"ends mid-frame after {keep:,} compressed bytes" in message
    lines_read = int(re.search(r"\(([\d,]+) lines read\)", message).group(1).replace(",", ""))
    assert lines_read < N_RECORDS
    if cut == "half":
        assert lines_read > 0            # the intact blocks before the cut were read


@pytest.mark.parametrize("attack", ["bytes overwritten", "not zstd at all", "garbage after the frame"])
def test_corrupt_zst_is_an_error_naming_the_file_not_a_zstd_traceback(tmp_path, attack):
    """Damaged data used to surface as a raw zstandard.ZstdError (not a ValueError, naming no
    file). The frame carries a checksum, as the zstd command line writes by default: without one,
    damaged literals can decode silently."""
    raw = b"".join(_record(t) for t in _texts())
    whole = _zstd(raw, write_checksum=True)
    middle = len(whole) // 2
    data = {"bytes overwritten": whole[:middle] + b"\xff" * 64 + whole[middle + 64:],
            "not zstd at all": raw,
            "garbage after the frame": whole + b"not a zstd frame"}[attack]
    shard = tmp_path / "shard.jsonl.zst"
    shard.write_bytes(data)
    with pytest.raises(ValueError, match=re.escape(f"{shard} is truncated or corrupt: zstd finds it "
                                                   "corrupt")) as caught:
        _read_all(_local(shard))
    assert re.search(r"on reading compressed bytes [\d,]+ to [\d,]+", str(caught.value))


def test_empty_zst_is_an_error(tmp_path):
    """A 0-byte .zst (a write or download that never started) used to read as an empty shard."""
    shard = tmp_path / "shard.jsonl.zst"
    shard.write_bytes(b"")
    with pytest.raises(ValueError, match=re.escape(f"{shard} is truncated or corrupt: it is empty")):
        _read_all(_local(shard))


def test_concatenated_zst_frames_are_read_completely(tmp_path):
    """Frames written one after another (appended shards, a checksum on some): the reader feeds the
    decompressor itself, so the bytes after the end of a frame must begin the next one."""
    texts = _texts(300)
    frames = [_shard(texts[:100]), _zstd(b"".join(_record(t) for t in texts[100:200]), write_checksum=True,
                                         write_content_size=True)]
    frames += [_shard([t]) for t in texts[200:]]         # many small frames: several per 512-byte feed
    shard = tmp_path / "shard.jsonl.zst"
    shard.write_bytes(b"".join(frames))
    stats = DataStats()
    assert sorted(_read_all(_local(shard), stats)) == sorted(texts)
    assert (stats.documents, stats.malformed) == (300, 0)


# --- a maximum document size -----------------------------------------------------------------

@pytest.mark.slow
def test_one_enormous_line_is_skipped_in_bounded_memory(tmp_path):
    """A 13 KB .zst holding one 400 MiB line used to be read whole (a MemoryError on a small
    machine). The test writes the shard in 1 MiB steps, so it never holds the line itself."""
    before, after = _texts(3), _texts(5)[3:]
    long_but_allowed = "b" * (3 * 2 ** 20)               # crosses many decompressed pieces, kept
    shard = tmp_path / "bomb.jsonl.zst"
    with open(shard, "wb") as fh, zstandard.ZstdCompressor().stream_writer(fh) as writer:
        writer.write(b"".join(_record(t) for t in before) + b'{"text": "')
        for _ in range(400):
            writer.write(b"a" * 2 ** 20)
        writer.write(b'"}\n' + b"".join(_record(t) for t in after + [long_but_allowed]))
    assert shard.stat().st_size < 100_000

    stats = DataStats()
    tracemalloc.start()
    try:
        start, baseline = time.perf_counter(), tracemalloc.get_traced_memory()[0]
        docs = _read_all(_local(shard), stats)
        peak = tracemalloc.get_traced_memory()[1] - baseline
        seconds = time.perf_counter() - start
    finally:
        tracemalloc.stop()
    assert sorted(docs) == sorted(before + after + [long_but_allowed])
    assert stats.oversized == 2                          # once for each split's pass over the shard
    assert peak < 64 * 2 ** 20, f"peak {peak / 2 ** 20:.1f} MiB"
    assert seconds < 20


def test_the_cap_applies_to_plain_jsonl_and_keeps_the_rank_assignment(tmp_path):
    """A line just over max_document_bytes is skipped and counted, yet still takes its place
    (record k -> rank k % world_size), so every rank keeps the same records as before."""
    cap = 100
    filler = cap - len(_record("").rstrip(b"\n"))
    exactly, over = "x" * filler, "y" * (filler + 1)            # a line of cap and cap + 1 bytes
    texts = ["r0", "r1", over, "r3", exactly, "r5", "r6"]
    shard = tmp_path / "train" / "0.jsonl"
    shard.parent.mkdir()
    shard.write_bytes(b"".join(_record(t) for t in texts))
    (tmp_path / "validation").mkdir()
    (tmp_path / "validation" / "0.jsonl").write_bytes(_record("v"))
    config = _local(tmp_path, max_document_bytes=cap)

    stats = [DataStats() for _ in range(2)]
    parts = [list(iter_documents(config, "train", rank, 2, stats[rank])) for rank in range(2)]
    assert parts == [["r0", exactly, "r6"], ["r1", "r3", "r5"]]
    assert [s.oversized for s in stats] == [1, 0]


@pytest.mark.slow
def test_the_cap_applies_to_hub_streaming(tmp_path):
    """The `datasets` path reads a text whole (json through pyarrow), but one over the cap is then
    skipped and counted instead of being tokenised."""
    texts = ["short", "é" * 60, "also short"]                    # 120 bytes of UTF-8 in 60 characters
    files = {"train": [str(tmp_path / "train.jsonl")], "validation": [str(tmp_path / "validation.jsonl")]}
    Path(files["train"][0]).write_bytes(b"".join(_record(t) for t in texts))
    Path(files["validation"][0]).write_bytes(_record("v"))
    stats = DataStats()
    config = DataConfig(source="slimpajama", max_document_bytes=100)
    docs = list(stream_hub_documents(config, "train", stats=stats, data_files=files))
    assert docs == ["short", "also short"]
    assert (stats.documents, stats.oversized) == (2, 1)


def test_the_cap_applies_to_the_demo_corpus():
    config = DataConfig(source="demo", demo_max_bytes=300_000, max_document_bytes=20_000)
    stats = DataStats()
    docs = _read_all(config, stats)
    assert docs and all(len(doc.encode()) <= 20_000 for doc in docs)
    assert stats.oversized > 0 and stats.documents == len(docs)


@pytest.mark.parametrize("value", [0, -1, 2 ** 31 + 1, 1.5, True, "16MiB", None])
def test_max_document_bytes_is_validated(value):
    with pytest.raises(ValueError, match=r"^max_document_bytes=.* is invalid: "):
        DataConfig(max_document_bytes=value)
    assert DataConfig(max_document_bytes=1).max_document_bytes == 1
    assert DataConfig(max_document_bytes=2 ** 31).max_document_bytes == 2 ** 31


# --- what is reported ------------------------------------------------------------------------

def test_data_stats_summary_names_only_what_was_skipped():
    assert DataStats().summary() == "0 documents; no records skipped"
    assert (DataStats(documents=1234, malformed=3, oversized=1, filtered=40).summary()
            == "1,234 documents; 3 malformed, 1 oversized and 40 filtered records skipped")
    assert DataStats(documents=1, oversized=1).summary() == "1 document; 1 oversized record skipped"
    assert DataStats(documents=2, malformed=1, filtered=5).summary() == (
        "2 documents; 1 malformed and 5 filtered records skipped")
    stats = DataStats(documents=7, oversized=2)
    assert DataStats(**stats.as_dict()) == stats


def test_a_lone_surrogate_is_a_malformed_record_not_a_crash(tmp_path):
    """JSON allows the escape \\ud800 alone, which is not text: hashing it for the split crashed."""
    shard = tmp_path / "s.jsonl"
    shard.write_bytes(b'{"text": "bad \\ud800 text"}\n' + _record("good text"))
    stats = DataStats()
    assert _read_all(_local(shard), stats) == ["good text"]
    assert stats.malformed == 2 and stats.documents == 1          # read once per split


def test_skip_counts_count_each_record_once_however_many_passes(tmp_path):
    """Attack: a long run. Old: the train stream counted its bad records again on every pass over the
    data (2 bad lines read 3 times printed as '6 malformed')."""
    shard = tmp_path / "s.jsonl"
    shard.write_bytes(b"{not json\n" + b"".join(_record(t) for t in _texts(40)) + b'{"no_text": 1}\n')
    config, tokenizer = _local(shard, validation_fraction=1e-9), ByteTokenizer()
    per_pass = len(list(pack_blocks(iter_documents(config, "train"), tokenizer, 33))) // 4
    stats = DataStats()
    stream = batches(config, tokenizer, "train", seq_len=32, batch_size=4, stats=stats)
    list(islice(stream, 3 * per_pass + 1))                            # into the fourth pass
    assert per_pass > 0 and (stats.malformed, stats.documents) == (2, 40)


# --- inputs that used to end in a traceback ------------------------------------------

def test_a_line_nested_too_deep_to_parse_is_a_malformed_record(tmp_path):
    """A line nested 100,000 deep used to end the run with a RecursionError traceback."""
    shard = tmp_path / "deep.jsonl"
    shard.write_bytes(_record("before") + b"[" * 100_000 + b"]" * 100_000 + b"\n" + _record("after"))
    stats = DataStats()
    assert sorted(_read_all(_local(shard, validation_fraction=0.5), stats)) == ["after", "before"]
    assert stats.malformed == 2                   # once for each split (a hash split reads every record for each)


@pytest.mark.parametrize("window_log", [27, 28, 31])
def test_a_zst_asking_for_a_window_past_the_bound_is_refused_with_a_message(tmp_path, window_log, monkeypatch):
    """`zstd --long=31` makes a shard of a few kilobytes whose frame asks for a 2 GiB window, which decoding holds:
    a 96 KB shard holding one 2.3 GB line cost 2.4 GB of memory (the bound was zstd's own limit, 2^31). Frames
    may now ask for at most 2^27 bytes (`zstd --long`'s default), which still read; past it, the reader and the
    whole-shard check refuse the shard naming its window and how to recompress it."""
    from cem_core.experiments.lm import shard_cache

    monkeypatch.setenv("CEM_LAB_CACHE_DIR", str(tmp_path / "cache"))
    texts = _texts(50)
    params = zstandard.ZstdCompressionParameters.from_level(3, window_log=window_log, enable_ldm=True)
    shard = tmp_path / "long.jsonl.zst"
    shard.write_bytes(_zstd(b"".join(_record(t) for t in texts), compression_params=params))
    assert zstandard.get_frame_parameters(shard.read_bytes()).window_size == 2 ** window_log
    if window_log == 27:
        assert sorted(_read_all(_local(shard))) == sorted(texts)
        assert shard_cache.check_shards([shard])[shard]["bytes"] == shard.stat().st_size
        return
    message = (f"{shard} is refused: its zstd frames ask for a window of {2 ** (window_log - 20):,} MiB (written "
               "with `zstd --long=28` or more), and a shard may use at most 128 MiB")
    with pytest.raises(ValueError, match=re.escape(message)) as err:
        _read_all(_local(shard))
    assert "zstd -dc long.jsonl.zst | zstd --long=27 -o NEW" in str(err.value)
    with pytest.raises(ValueError, match=re.escape(message)):
        shard_cache.check_shards([shard])


def test_a_flood_of_blank_lines_is_read_in_a_few_passes_not_one_per_line(tmp_path):
    """A 16.7 KB shard holding 320 MiB of newlines turned a 3-step run into 264 s with no output: each blank
    line was split out and looked at in Python, one by one. Runs of blank lines are now dropped per piece in one
    C-speed pass, so the lines handed on are the records and a few blanks per decompressed piece, not one per
    newline (counted here, not timed: 64 MiB of newlines, four 16 MiB pieces)."""
    from cem_core.experiments.lm import shard_reader

    pieces = [_record("first") + b"\n" * 2 ** 24, b"\n" * 2 ** 24, b" \n" * 2 ** 23, b"\n" * 2 ** 24 + _record("last")]
    lines = list(shard_reader._lines(iter(pieces), 2 ** 20))
    assert [json.loads(bytes(line))["text"] for line in lines if line.strip()] == ["first", "last"]
    assert len(lines) <= 2 * len(pieces) + 2, len(lines)
    shard = tmp_path / "flood.jsonl.zst"
    shard.write_bytes(_zstd(b"".join(pieces)))
    assert shard.stat().st_size < 30_000
    assert sorted(_read_all(_local(shard, validation_fraction=0.5))) == ["first", "last"]


def test_a_checksum_mismatch_is_found_by_the_whole_shard_check(tmp_path, monkeypatch):
    """The frame's checksum (the zstd command line writes one) is verified when a shard is checked whole; a
    shard checked once is not read again while its size and modification time stay (the shard cache)."""
    import os

    from cem_core.experiments.lm import shard_cache, shard_reader

    monkeypatch.setenv("CEM_LAB_CACHE_DIR", str(tmp_path / "cache"))
    whole = _zstd(b"".join(_record(t) for t in _texts(100)), write_checksum=True)
    shard = tmp_path / "sum.jsonl.zst"
    shard.write_bytes(whole[:-4] + bytes(b ^ 0xFF for b in whole[-4:]))      # the checksum, flipped
    with pytest.raises(ValueError, match=re.escape(f"{shard} is truncated or corrupt")):
        shard_cache.check_shards([shard])
    shard.write_bytes(whole)
    os.utime(shard, ns=(1, 10 ** 18))
    first = shard_cache.check_shards([shard])[shard]
    assert first["bytes"] == len(whole) and (tmp_path / "cache" / "shards.json").is_file()

    def unread(file):
        raise AssertionError(f"{file} read again")

    monkeypatch.setattr(shard_reader, "_open_shard", unread)
    assert shard_cache.check_shards([shard])[shard] == first                   # from the cache
    os.utime(shard, ns=(1, 10 ** 18 + 1))                                      # touched: read again
    with pytest.raises(AssertionError, match="read again"):
        shard_cache.check_shards([shard])


def test_a_shard_rewritten_with_its_size_and_time_put_back_is_read_again(tmp_path, monkeypatch):
    """The checksum cache trusted size and modification time, which `touch -d` puts back: a shard rewritten in
    place with other text of the same size kept its old checksum, and a resumed run read other data under it
    (validation perplexity 189.2 -> 208.2, silently). The cache also keys on the change time and inode, which no
    tool sets, so the rewrite is read again and the new checksum differs."""
    import os

    from cem_core.experiments.lm import shard_cache

    monkeypatch.setenv("CEM_LAB_CACHE_DIR", str(tmp_path / "cache"))
    shard = tmp_path / "a.jsonl"
    shard.write_bytes(b"".join(_record(t) for t in _texts(100)))
    before = shard.stat()
    first = shard_cache.check_shards([shard])[shard]
    assert shard_cache.check_shards([shard])[shard] == first                    # unchanged: from the cache
    time.sleep(0.01)
    with open(shard, "r+b") as f:                                               # in place: the same inode
        f.write(b"{\"text\": \"R")
    os.utime(shard, ns=(before.st_atime_ns, before.st_mtime_ns))
    assert (shard.stat().st_size, shard.stat().st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    again = shard_cache.check_shards([shard])[shard]
    assert again["bytes"] == first["bytes"] and again["sha256"] != first["sha256"]


def test_checking_shards_whole_shows_progress(tmp_path, monkeypatch, capsys):
    """A run checks every shard whole before it trains, which for large shards took minutes with no output. A
    progress bar (stderr) now shows the bytes checked once the check takes longer than two seconds; its delay is
    set to zero here instead of writing a shard that takes two seconds."""
    from cem_core.experiments.lm import shard_cache

    monkeypatch.setenv("CEM_LAB_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(shard_cache, "PROGRESS_DELAY", 0)
    for name in ("a.jsonl", "b.jsonl"):
        (tmp_path / name).write_bytes(b"".join(_record(t) for t in _texts(200)))
    shard_cache.check_shards([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    err = capsys.readouterr().err
    assert "checking 2 shard(s) whole" in err and "100%" in err, err
    shard_cache.check_shards([tmp_path / "a.jsonl", tmp_path / "b.jsonl"])
    assert "checking" not in capsys.readouterr().err                            # both from the cache: no bar


def test_a_run_folder_inside_its_data_folder_is_not_read_as_data(tmp_path, capsys):
    """`lm train --data D --out D/run`: the run's own metrics.jsonl was found as a new shard on the next command,
    so the run could never be resumed or rerun ("data_content.shards['run/metrics.jsonl'] has changed"). A run's
    or sweep's folder (its lock and run.json) is left out of the shards, and the rerun finishes."""
    from conftest import shard_corpus

    from cem_core.__main__ import main
    from cem_core.experiments.lm import shards

    folder = tmp_path / "data"
    folder.mkdir()
    shard_corpus(folder, name="a.jsonl")
    args = ["lm", "train", "--variant", "llama", "--data", str(folder), "--out", str(folder / "run"),
            "--steps", "2", "--batch-size", "4", "--seq-len", "16"]
    assert main(args) == 0
    assert (folder / "run" / "metrics.jsonl").is_file()
    assert shards.find_shards(folder) == [folder / "a.jsonl"]
    capsys.readouterr()
    assert main(args) == 0, capsys.readouterr().err                            # the same command again


def test_an_unreadable_shard_or_subfolder_is_a_message_never_skipped(tmp_path, monkeypatch):
    """A shard or subfolder the user may not read (mode 000) used to end in a PermissionError traceback, and a
    subfolder was skipped silently. The test makes them unreadable for the reader itself: it runs as root in CI,
    whom permissions do not stop."""
    import builtins
    import os

    from cem_core.experiments.lm import shard_reader

    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "a.jsonl").write_bytes(_record("readable"))
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked" / "b.jsonl").write_bytes(_record("private"))
    real_scandir, real_open = os.scandir, builtins.open

    def scandir(path="."):
        if Path(path).name == "locked":
            raise PermissionError(13, "Permission denied", str(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    with pytest.raises(ValueError, match=r"path=.* cannot be read: .*locked: Permission denied"):
        _read_all(_local(tmp_path))
    monkeypatch.setattr(os, "scandir", real_scandir)

    def unreadable(file, *args, **kwargs):
        if str(file).endswith("b.jsonl"):
            raise PermissionError(13, "Permission denied", str(file))
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(shard_reader, "open", unreadable, raising=False)
    with pytest.raises(ValueError, match=r"b\.jsonl.* cannot be read \(Permission denied\)"):
        _read_all(_local(tmp_path))


def test_an_empty_split_says_what_was_skipped(tmp_path):
    """"holds less than one block" used to be all a run said when every record was skipped as malformed."""
    from cem_core.experiments.lm import validation_blocks

    shard = tmp_path / "bad.jsonl"
    shard.write_bytes(b"not json\n" * 5 + b'{"no_text": 1}\n')
    for read in (lambda c: validation_blocks(c, ByteTokenizer(), 16, 4),
                 lambda c: next(batches(c, ByteTokenizer(), "train", 16, 4))):
        with pytest.raises(ValueError, match=r"holds less than one (block|batch).*\(read: 0 documents; "
                                             r"6 malformed records skipped\)"):
            read(_local(shard))
