"""`rem-cycle import` streams: its Python heap peak does not grow with the file."""

import json
import tracemalloc
from pathlib import Path

import pytest

from config import Settings
from pipelines.importer import import_sessions
from worker.cycle import Stores


def write_file(path: Path, sessions: int, *, offset: int) -> int:
    with path.open("w", encoding="utf-8") as handle:
        for s in range(sessions):
            sid = f"mem-{offset + s:06d}"
            turns = [{"text": f"{sid} turn {t} " + "payload " * 120} for t in range(5)]
            handle.write(json.dumps({"sessionId": sid, "summary": "s", "turns": turns}) + "\n")
    return path.stat().st_size


async def peak_of_import(stores: Stores, settings: Settings, path: Path) -> int:
    tracemalloc.start()
    try:
        stats = await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                                      summary_collection=settings.session_collection, batch_rows=200)
        assert not stats.bad_lines
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


@pytest.mark.slow
async def test_import_memory_is_flat_in_file_size(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    # Warm up Chroma's collections and caches so they do not count against the first file.
    write_file(tmp_path / "warm.jsonl", 50, offset=0)
    await peak_of_import(stores, settings, tmp_path / "warm.jsonl")
    small_size = write_file(tmp_path / "small.jsonl", 300, offset=1_000)
    large_size = write_file(tmp_path / "large.jsonl", 1_500, offset=10_000)
    small_peak = await peak_of_import(stores, settings, tmp_path / "small.jsonl")
    large_peak = await peak_of_import(stores, settings, tmp_path / "large.jsonl")
    assert large_size > 4.5 * small_size
    # Five times the file, about the same peak: memory follows the batch, not the file.
    assert large_peak < 1.5 * small_peak, (small_peak, large_peak)
    assert large_peak < large_size / 2, (large_peak, large_size)


async def test_an_oversized_line_is_read_past_in_pieces(stores: Stores, settings: Settings, tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    good = json.dumps({"sessionId": "good", "turns": [{"text": "fine"}]}) + "\n"
    with path.open("w", encoding="utf-8") as handle:
        handle.write(good)
        handle.write('{"sessionId": "huge", "turns": [{"text": "' + "y" * 30_000_000 + '"}]}\n')
        handle.write(good.replace("good", "after"))
    write_file(tmp_path / "warm.jsonl", 5, offset=90_000)  # Chroma's collections and caches
    await peak_of_import(stores, settings, tmp_path / "warm.jsonl")
    tracemalloc.start()
    try:
        stats = await import_sessions(path, chroma=stores.chroma, memory_collection=settings.memory_collection,
                                      summary_collection=settings.session_collection, max_line_bytes=1024 * 1024)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert stats.sessions == 2 and [b["line"] for b in stats.bad_lines] == [2]
    assert stats.bad_lines[0]["error"] == "line is 30000046 bytes, the limit is 1048576"
    # The 30 MB line is never held: the peak is about the 1 MiB limit, not the line.
    assert peak < 4 * 1024 * 1024, peak
