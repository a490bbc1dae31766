"""``bench/bench_identity.py --runs`` scores the labelled pairs of the aider and SWE-agent splits on
the graph a run of their sessions left (``aider-fresh``, ``sweagent-fresh``): a real cycle over a
few aider-like sessions, a real SQLite graph."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_identity import load_pairs, run_report
from config import Settings
from pipelines.importer import import_sessions
from store.chroma import ChromaStore
from tests.conftest import write_sessions
from worker.cycle import run_cycle

SESSIONS = [
    {"sessionId": "aider-0001", "title": "s1", "createdAt": "2026-11-01T10:00:00Z", "turns": [
        {"role": "user", "text": "The spinner in aider/spinner.py never stops: `Spinner.end()` is not called by `Coder.run`."},
        {"role": "assistant", "text": "I'll call `spinner.end()` after the reply; `end()` clears the line. GraphStore and DrainWorker are unrelated."},
    ]},
    {"sessionId": "aider-0002", "title": "s2", "createdAt": "2026-11-02T10:00:00Z", "turns": [
        {"role": "user", "text": "`Spinner.end()` again, and spinner.py prints twice. Also see `end()` in Spinner."},
        {"role": "assistant", "text": "Fixed `end()` in spinner.py so that `Spinner.end()` prints once."},
    ]},
]
# (type, existing, incoming, same): linked by the ``qualified`` rule, on the review list
# (``file-basename``), two classes left apart.
PAIRS = [
    ("METHOD", "Spinner.end", "end", True),
    ("FILE", "aider/spinner.py", "spinner.py", True),
    ("CLASS", "GraphStore", "DrainWorker", False),
]


def labelled(path: Path, split: str) -> Path:
    path.write_text("".join(json.dumps({
        "split": split, "type": kind, "existing": {"name": old, "aliases": []}, "incoming": {"name": new, "aliases": []},
        "source": "merge", "rule": "", "score": 1.0, "same": same,
    }) + "\n" for kind, old, new, same in PAIRS), encoding="utf-8")
    return path


@pytest.mark.parametrize(("split", "run", "other"), [("aider", "aider-fresh", "sweagent"), ("sweagent", "sweagent-fresh", "aider")])
async def test_the_aider_and_sweagent_pairs_are_scored_on_their_own_run(
    settings: Settings, tmp_path: Path, split: str, run: str, other: str
) -> None:
    await import_sessions(write_sessions(tmp_path / "in.jsonl", SESSIONS), chroma=ChromaStore(settings),
                          memory_collection=settings.memory_collection, summary_collection=settings.session_collection)
    assert (await run_cycle(settings)).outcome == "completed"
    # The other source's pairs are in the file too: they belong to another run, absent here.
    pairs = load_pairs(labelled(tmp_path / "mine.jsonl", split)) + load_pairs(labelled(tmp_path / "other.jsonl", other))

    report = run_report({run: settings.data_dir}, pairs)

    assert report["runs"][run]["sessions"] == 2
    assert set(report["splits"]) == {f"{split}/identifier", f"{split}/path", f"{split}/all"}
    code, path = report["splits"][f"{split}/identifier"], report["splits"][f"{split}/path"]
    assert (code["pairs"], code["positives"], code["absent"], code["precision"], code["recall"]) == (2, 1, 0, 1.0, 1.0)
    assert (path["pairs"], path["positives"], path["recall"], path["recall_with_review"]) == (1, 1, 0.0, 1.0)
    every = report["splits"][f"{split}/all"]
    assert (every["pairs"], every["positives"], every["recall"], every["recall_with_review"], every["review_noise"]) == (3, 2, 0.5, 1.0, 0.0)
