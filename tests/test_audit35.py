"""An attack on the thirty-fourth and thirty-fifth sessions' code (audit35).

- An import line ending in ``\\r\\n`` (a GitHub issue's text, as SWE-bench's task descriptions
  quote it) hid its last name: ``from io import StringIO\\r`` imported nothing, so ``StringIO``
  said beside it was a CLASS of the project, while the same line ending in ``\\n`` made it the
  standard library's.
- The offline extractor cost the square of a long line's length in an assistant's or a person's
  turn: each mention found its sentence again (a scan of the whole line, when it has no ``. ``),
  and each new node of the turn was looked for in a list of the turn's nodes. 280 KB of file names
  on one line took about 17 s, 200 KB of one path said 7,000 times 37 s.
- A kept identity index (foldidx) dropped a node another worker's commit folded away only when it
  was of the survivor's type. A CONCEPT that ``named`` folds into the typed node of its name (the
  CONCEPT `las vegas` into the PLACE `Las Vegas`) stayed, and it still counted as a longer name:
  `vegas` said beside `vegas strip` was no ``extension`` pair for that worker, one for a fresh index.
"""

from __future__ import annotations

import random
import time
from pathlib import Path
from typing import Any

import pytest

from pipelines.extract.heuristic import DESCRIPTION_CHARS, _standard_library_imports, extract_heuristic
from tests.test_extract import conversation, nodes_of
from tests.workers_support import commit_naming


@pytest.mark.parametrize("newline", ["\n", "\r\n"])
def test_an_import_line_ending_in_crlf_imports_its_last_name(newline: str) -> None:
    """The task's code block ends its lines as the issue's author typed them; the rule reads the
    same imports whatever the line ending (the ``\\n`` case is a guard: it passes on both)."""
    block = newline.join(["```python", "from io import StringIO", "from datetime import timezone as tz", "buf = StringIO()", "```"])
    task = f"Fix the bug in `DateTimeField`.{newline}{newline}{block}{newline}"
    said = "So `StringIO` and `tz.utc()` are read; `DateTimeField` breaks."
    nodes = set(nodes_of(conversation(("user", task), ("assistant", said))))
    assert "CLASS:StringIO" not in nodes and "METHOD:tz.utc" not in nodes
    assert "CLASS:DateTimeField" in nodes
    imported = _standard_library_imports(conversation(("user", task)))
    assert imported.named == {"StringIO", "timezone", "tz"} and imported.bound == {"StringIO", "tz"}


@pytest.mark.parametrize("line", [
    "I changed these files: " + ", ".join(f"pkg/mod{i}.py" for i in range(18_000)) + " and nothing else",
    "Then I opened " + "./a.py " * 28_000,
], ids=["many-names", "one-name-often"])
def test_a_long_line_of_names_is_extracted_in_linear_time(line: str) -> None:
    """About 250 KB on one line of the assistant's: well under a second now (the bound leaves a
    loaded machine room), 17 s and 37 s before."""
    unit = conversation(("user", "Fix `DateTimeField`."), ("assistant", line))
    began = time.perf_counter()
    reply = extract_heuristic(unit)
    assert time.perf_counter() - began < 5.0
    assert isinstance(reply["nodes"], list)


def _old_sentence_around(text: str, start: int, end: int) -> str:
    """The sentence as it was read before audit35, one scan per mention (the reference)."""
    left = max(text.rfind(". ", 0, start), text.rfind("\n", 0, start))
    right_candidates = [i for i in (text.find(". ", end), text.find("\n", end)) if i != -1]
    right = min(right_candidates) + 1 if right_candidates else len(text)
    return " ".join(text[left + 1 : right].split())[:DESCRIPTION_CHARS]


def test_a_description_is_the_sentence_it_was() -> None:
    """A guard (passes on both): on texts of random sentence ends, each mention's sentence is the
    one the per-mention scan read."""
    from pipelines.extract.heuristic import _FULL_STOP, _LINE_END, _sentence_bounds

    pieces = ["Alice", " ", ".", ". ", "\n", "Bob went home", "  ", ".\n", "x"]
    rng = random.Random(35)
    for _ in range(300):
        text = "".join(rng.choice(pieces) for _ in range(rng.randint(0, 30)))
        stops = [m.start() for m in _FULL_STOP.finditer(text)]
        lines = [m.start() for m in _LINE_END.finditer(text)]
        for start in range(len(text) + 1):
            for end in range(start, min(len(text), start + 6) + 1):
                left, right = _sentence_bounds(stops, lines, len(text), start, end)
                assert " ".join(text[left:right].split())[:DESCRIPTION_CHARS] == _old_sentence_around(text, start, end), (text, start, end)


def test_a_concept_folded_into_a_typed_node_by_another_worker_leaves_a_kept_index(tmp_path: Path) -> None:
    """Worker A's commit folds ``CONCEPT:las vegas`` into ``PLACE:Las Vegas`` (a ``named`` link:
    the typed node survives, the CONCEPT's claims keep `las vegas` its alias) and starts no new
    identity epoch. Worker B's index, built before, learns the PLACE from A's commit and must drop
    the CONCEPT, as an index built after the fold never has it."""
    from pipelines.extract.commit import Candidate
    from store.db import Database
    from worker.knowledge import identity_resolver

    path = tmp_path / "g.db"
    a, b, c = Database(path), Database(path), Database(path)

    def committed(session: str, node: str, name: str, *, fold: str | None = None) -> None:
        commit_naming(a, session, node, name, fold=fold, rule="named")

    def outcome(resolver: Any) -> list[tuple[str, str, list[str]]]:
        said = [Candidate("CONCEPT:vegas", "CONCEPT", "vegas"), Candidate("CONCEPT:vegas strip", "CONCEPT", "vegas strip")]
        return [(v.action, v.rule, [m.node_id for m in v.candidates]) for v in resolver(said).verdicts.values()]

    try:
        committed("s0", "CONCEPT:las vegas", "las vegas")
        committed("s1", "PERSON:Bob", "Bob")
        kept = identity_resolver(b)
        assert kept([Candidate("PERSON:Bob", "PERSON", "Bob")]) == {"PERSON:Bob": "PERSON:Bob"}  # index built
        committed("s2", "PLACE:Las Vegas", "Las Vegas", fold="CONCEPT:las vegas")
        fresh = outcome(identity_resolver(c))
        assert fresh == [("candidate", "extension", ["CONCEPT:vegas strip"]), ("create", "", [])]
        assert outcome(kept) == fresh
        assert kept.builds == 1  # learned from the commit, not rebuilt
    finally:
        a.close()
        b.close()
        c.close()
