"""bench/convert_transcripts.py's chat sources on tiny synthetic script frames (never the real data)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.convert_transcripts import OFFICE_LEAST, OFFICE_WINDOW, main, split_of, windows


def test_an_episode_is_cut_into_windows_and_a_short_last_one_joins_the_one_before() -> None:
    assert [len(w) for w in windows(range(2 * OFFICE_WINDOW + OFFICE_LEAST - 1))] == [OFFICE_WINDOW, OFFICE_WINDOW + OFFICE_LEAST - 1]
    assert [len(w) for w in windows(range(OFFICE_WINDOW + OFFICE_LEAST))] == [OFFICE_WINDOW, OFFICE_LEAST]
    assert [len(w) for w in windows(range(OFFICE_LEAST - 1))] == [OFFICE_LEAST - 1]  # nothing before it to join
    assert windows(list(range(2 * OFFICE_WINDOW))) == [list(range(OFFICE_WINDOW)), list(range(OFFICE_WINDOW, 2 * OFFICE_WINDOW))]


def test_the_office_converter_windows_the_spoken_lines_of_each_episode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rdata = pytest.importorskip("rdata", reason="the optional extra 'bench' is not installed")
    import pandas as pd

    rows: list[tuple[int, int, str, str, str]] = []  # season, episode, character, text, text_w_direction
    for n in range(OFFICE_WINDOW + OFFICE_LEAST - 1):  # one window plus a short tail
        rows.append((1, 2, "Michael" if n % 2 else "Todd Packer ", f"line {n}", f"[winks] line {n}"))
    rows.insert(5, (1, 2, "Pam", "", "[nods]"))  # only a stage direction: dropped, counts for no window
    rows += [(2, 1, "Dwight", f"beet {n}", f"beet {n}") for n in range(OFFICE_WINDOW + OFFICE_LEAST)]
    frame = pd.DataFrame({
        "index": pd.array(range(1, len(rows) + 1), dtype="Int32"),
        "season": pd.array([r[0] for r in rows], dtype="Int32"),
        "episode": pd.array([r[1] for r in rows], dtype="Int32"),
        "character": pd.array([r[2] for r in rows], dtype="string"),
        "text": pd.array([r[3] for r in rows], dtype="string"),
        "text_w_direction": pd.array([r[4] for r in rows], dtype="string"),
    }).iloc[::-1]  # out of order: the line number orders an episode
    rdata.write_rda(str(tmp_path / "theoffice.rda"), {"theoffice": frame})

    main(["office", str(tmp_path / "theoffice.rda"), "--out", str(tmp_path / "office")])

    sessions = [json.loads(line) for split in ("tune", "heldout") for line in (tmp_path / f"office.{split}.jsonl").read_text().splitlines()]
    assert sorted((s["sessionId"], len(s["turns"])) for s in sessions) == [
        ("office-s01e02-w00", OFFICE_WINDOW + OFFICE_LEAST - 1),
        ("office-s02e01-w00", OFFICE_WINDOW), ("office-s02e01-w01", OFFICE_LEAST),
    ]
    for split in ("tune", "heldout"):  # whole episodes, by split_of
        ids = [json.loads(line)["sessionId"] for line in (tmp_path / f"office.{split}.jsonl").read_text().splitlines()]
        assert all(split_of(sid.rsplit("-", 1)[0]) == split for sid in ids)
    first = next(s for s in sessions if s["sessionId"] == "office-s01e02-w00")
    assert [t["text"] for t in first["turns"]] == [f"line {n}" for n in range(OFFICE_WINDOW + OFFICE_LEAST - 1)]
    assert [t["role"] for t in first["turns"][:2]] == ["Todd Packer", "Michael"]
    assert len({t["id"] for s in sessions for t in s["turns"]}) == sum(len(s["turns"]) for s in sessions)
    assert json.loads(capsys.readouterr().out)["source"] == "office"
