"""The tenth round's comparison (bench/extract_learned.py): its trade-off curve and feature vector."""

from __future__ import annotations

from typing import Any

from bench.extract_learned import KINDS, TYPES, curve, features, hand_score


def node(node_id: str, useful: bool, *, kinds: tuple[str, ...] = ("prose",), turns: int = 1) -> dict[str, Any]:
    return {"session": "s", "node": node_id, "useful": useful, "source": "swe", "type": node_id.partition(":")[0],
            "turns": turns, "chunks": 1, "kinds": sorted(kinds), "salience_max": 4, "salience_min": 4, "library": False}


def test_the_curve_keeps_files_and_counts_what_a_threshold_removes() -> None:
    nodes = [node("FILE:a.py", False), node("CLASS:Keep", True), node("CLASS:Drop", False), node("METHOD:lost", True)]
    scores = [0.0, 0.9, 0.2, 0.4]  # a file's score is never asked
    plain, strict = curve(nodes, scores, (0.5,))
    assert plain == {"threshold": 0.0, "kept": 4, "precision": 0.5, "recall": 1.0, "noise_removed": 0, "useful_lost": 0}
    assert strict == {"threshold": 0.5, "kept": 2, "precision": 0.5, "recall": 0.5, "noise_removed": 1, "useful_lost": 1}


def test_the_hand_score_is_the_fifth_rounds_evidence() -> None:
    assert hand_score(node("CLASS:X", True, kinds=("user", "tool"), turns=7)) == 1.0  # 3 turns at most, +1 user, +1 tool
    assert hand_score(node("CLASS:X", True, kinds=("prose",), turns=1)) == 0.2


def test_the_feature_vector_names_each_place_and_type_once() -> None:
    vector = features(node("METHOD:self.run_once", True, kinds=("edit", "tool"), turns=2))
    places = vector[6:6 + len(KINDS)]
    types = vector[6 + len(KINDS):6 + len(KINDS) + len(TYPES)]
    assert places == [kind in ("edit", "tool") for kind in KINDS]
    assert types == [t == "METHOD" for t in TYPES]
    assert vector[6 + len(KINDS) + len(TYPES)] is True  # self.
