"""The ninth round's PERSON evidence listing (bench/person_evidence.py) on a real-looking scene."""

from __future__ import annotations

from bench.person_evidence import evidence_class, person_evidence
from config import Settings


def scene(*turns: tuple[str, str]) -> dict[str, object]:
    return {"sessionId": "friends-s01e01-c01", "turns": [
        {"id": f"friends-s01e01-c01-u{n:04}", "role": role, "text": text} for n, (role, text) in enumerate(turns, start=1)
    ]}


def test_each_person_node_says_what_typed_it() -> None:
    found = person_evidence(scene(
        ("Monica Geller", "Hey Rach, I went out with Julie. Aunt Edna says hi."),
        ("Rachel Green", "Paolo kissed me! I told Monica, and we saw Hootie and the Blowfish."),
    ), Settings())
    kinds = {row["name"]: row["evidence"] for row in found.values()}
    assert kinds["Monica Geller"] == ["role", "speaker"]  # her role, and her first name said
    assert kinds["Rachel Green"] == ["role"]  # "Rach" is no first name of hers: a node of its own
    assert kinds["Rach"] == ["greeting"]
    assert kinds["Julie"] == ["lead"]
    assert kinds["Edna"] == ["title"]
    assert kinds["Paolo"] == ["verb"]
    assert "Blowfish" not in kinds  # "and the Blowfish": no person lead before "the"
    assert [evidence_class(kinds[n]) for n in ("Monica Geller", "Rach", "Julie", "Edna", "Paolo")] == [
        "role", "greeting", "lead", "title", "verb",
    ]
