"""What the held answers' file costs an extract phase (heldonce): ``worker.held_answers``.

Measured in one process, best of 5, in a temporary data dir:

- *no file*: ``take_from_file`` when nothing is held (every extract phase of a healthy database);
- *write*: ``HeldAnswersFile.replace`` of ``--answers`` held answers (JSON lines, ``.part``,
  ``fsync``, rename, folder ``fsync``), as ``write_to_file`` does after its check;
- *take*: ``take_from_file`` of that file (read, ``HeldAnswers.keep_records``, removal);
- the baseline: the same bytes written to a plain file with no ``fsync`` nor rename.

Each answer is an extraction of 6 nodes and 3 edges, each with a 120-character quote (about 3 kB
a line, the size of a real chunk's answer).

    python bench/bench_held_file.py [--answers 1000]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from config import load_settings  # noqa: E402
from pipelines.extract.inflight import HeldAnswer, HeldAnswers  # noqa: E402
from pipelines.extract.model import ChunkExtraction, Evidence, ExtractedEdge, ExtractedNode  # noqa: E402
from store.held_file import held_answers_file  # noqa: E402
from worker.held_answers import take_from_file  # noqa: E402


def _answers(count: int) -> HeldAnswers:
    held = HeldAnswers()
    for i in range(count):
        quote = f"turn of session {i} quoting the text it was asked about " * 2
        nodes = tuple(ExtractedNode(f"CLASS:Item{i}x{n}", "CLASS", f"Item{i}x{n}", "a class the turn names",
                                    evidence=(Evidence(f"s{i}-t{n % 2}", quote[:120]),)) for n in range(6))
        edges = tuple(ExtractedEdge(nodes[n].id, nodes[n + 1].id, "USES", "the turn says so",
                                    (Evidence(f"s{i}-t0", quote[:120]),)) for n in range(3))
        extraction = ChunkExtraction(f"s{i}:chunk:0", "a summary of the chunk", nodes, edges)
        held.keep(("openai:model:p2:s1", f"{i:064x}"), HeldAnswer(extraction, f"s{i}", (f"s{i}-t0", f"s{i}-t1"), 900, 400, 2100.0,
                                                                            datetime.now(UTC)))
    return held


def _best(step: Callable[[], object], *, prepare: Callable[[], object] = lambda: None, runs: int = 5) -> float:
    times = []
    for _ in range(runs):
        prepare()
        started = time.perf_counter()
        step()
        times.append(time.perf_counter() - started)
    return min(times) * 1000


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--answers", type=int, default=1000)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        settings = load_settings(data_dir=Path(tmp))
        settings.data_dir.mkdir(parents=True, exist_ok=True)
        spill = held_answers_file(settings)
        records = _answers(args.answers).records()
        plain = settings.data_dir / "plain.jsonl"

        def plain_write() -> None:
            with plain.open("wb") as out:
                for record in records:
                    out.write(json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode() + b"\n")

        none = _best(lambda: take_from_file(settings, HeldAnswers()))
        baseline = _best(plain_write)
        write = _best(lambda: spill.replace(records))
        take = _best(lambda: take_from_file(settings, HeldAnswers()), prepare=lambda: spill.replace(records))
        size = plain.stat().st_size
    print(f"{args.answers} answers, {size / 1e6:.2f} MB")
    print(f"no file (a healthy phase): {none * 1000:.1f} µs")
    print(f"plain write, no fsync (baseline): {baseline:.1f} ms")
    print(f"write (replace whole, fsync): {write:.1f} ms ({write / baseline:.2f}× the baseline)")
    print(f"take (read, decode, remove): {take:.1f} ms ({take / baseline:.2f}× the baseline)")


if __name__ == "__main__":
    main()
