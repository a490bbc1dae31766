"""Public transcripts → rem-cycle import JSONL, split into a tuning and a held-out half.

Two sources (fetched by the operator, never committed; see bench/RESULTS.md for source + licence):

- ``friends``: the Friends scripts as tidied by EmilHvitfeldt/friends (``data/friends.rda``, MIT,
  from emorynlp/character-mining, Apache-2.0). One session per scene (a conversation between named
  people); a turn's role is the speaker's name. Scene directions are dropped (nobody says them).
- ``swe``: mini-swe-agent trajectories (``*.traj.json``, MIT) — the task (the first ``user``
  message), the agent's messages (``assistant``) and the environment's answers (``tool``: every
  later ``user`` message — command output, format errors, timeouts, the submitted diff).
- ``sweagent``: SWE-agent trajectories (``*.traj``, MIT; the ones committed in the SWE-agent
  repository) — another agent framework, model and prompt template; the first user message is the
  task, later user (or ``tool``) messages are the environment's answers; demonstrations embedded in
  the prompt (``is_demo``) and the system prompt are dropped; replays of one task are kept once.
  Issue 11's third round holds all of them out (split ``fresh``): none is used for tuning.

The split is by a hash of the episode (friends) or the task id (swe), fixed before any labelling::

    python -m bench.convert_transcripts friends /tmp/qe-data/friends.rda --out /tmp/qe-data/friends
    python -m bench.convert_transcripts swe /tmp/qe-data/trajs --out /tmp/qe-data/swe

writes ``<out>.tune.jsonl`` and ``<out>.heldout.jsonl``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SPLITS = ("tune", "heldout")
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
_NOT_SPOKEN = {"Scene Directions"}


def split_of(key: str) -> str:
    """``tune`` or ``heldout``: a fixed function of the key, so nobody picks the held-out half."""
    return SPLITS[hashlib.sha256(key.encode()).digest()[0] % 2]


def friends_sessions(rda_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(split key, import line) per scene of the Friends scripts."""
    import rdata  # only this converter needs it: pip install rdata

    frame = rdata.read_rda(str(rda_path))["friends"]
    scenes: dict[tuple[int, int, int], list[tuple[int, str, str]]] = {}
    for text, speaker, season, episode, scene, utterance in frame.itertuples(index=False):
        if speaker in _NOT_SPOKEN or not isinstance(text, str) or not text.strip():
            continue
        scenes.setdefault((int(season), int(episode), int(scene)), []).append((int(utterance), str(speaker), text))
    for number, ((season, episode, scene), lines) in enumerate(sorted(scenes.items())):
        session_id = f"friends-s{season:02d}e{episode:02d}-c{scene:02d}"
        start = _EPOCH + timedelta(days=number)
        turns = [
            {"id": f"{session_id}-u{utterance:04d}", "role": speaker[:64], "text": text,
             "createdAt": (start + timedelta(seconds=i)).isoformat()}
            for i, (utterance, speaker, text) in enumerate(sorted(lines))
        ]
        yield f"friends-s{season:02d}e{episode:02d}", {
            "sessionId": session_id, "title": session_id, "createdAt": start.isoformat(), "turns": turns, "noSummary": True,
        }


def swe_sessions(trajs_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(split key, import line) per mini-swe-agent trajectory under ``trajs_dir``."""
    for number, path in enumerate(sorted(trajs_dir.rglob("*.traj.json"))):
        data = json.loads(path.read_text(encoding="utf-8"))
        instance = str(data.get("instance_id") or path.name.removesuffix(".traj.json"))
        session_id = "swe-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in instance)
        start = _EPOCH + timedelta(days=number)
        turns = []
        asked = False
        for i, message in enumerate(data.get("messages", [])):
            content = message.get("content")
            if isinstance(content, list):  # content parts
                content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            role = message.get("role")
            if role == "system" or not isinstance(content, str) or not content.strip():
                continue
            if role == "user":
                # The first is the task; every later one is the environment's (command output, a
                # format error, a timeout notice, the final diff), whatever it starts with.
                role = "tool" if asked else "user"
                asked = True
            turns.append({"id": f"{session_id}-m{i:04d}", "role": role, "text": content,
                          "createdAt": (start + timedelta(seconds=i)).isoformat()})
        yield instance, {"sessionId": session_id, "title": instance, "createdAt": start.isoformat(), "turns": turns, "noSummary": True}


def sweagent_sessions(trajs_dir: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``fresh``, import line) per distinct SWE-agent trajectory (``*.traj``) under ``trajs_dir``;
    a task replayed under several configurations (same file name) is kept once, the first."""
    seen: set[str] = set()
    for number, path in enumerate(sorted(trajs_dir.rglob("*.traj"))):
        task = path.name.removesuffix(".traj").rsplit("_", 1)[-1] if "replay__" in path.name else path.name.removesuffix(".traj")
        if task in seen:
            continue
        seen.add(task)
        data = json.loads(path.read_text(encoding="utf-8"))
        session_id = "sa-" + "".join(c if c.isalnum() or c in "-_." else "-" for c in task)[-100:]
        start = _EPOCH + timedelta(days=number)
        turns = []
        asked = False
        for i, message in enumerate(data.get("history", [])):
            content = message.get("content")
            if isinstance(content, list):
                content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            role = message.get("role")
            if role == "system" or message.get("is_demo") or not isinstance(content, str) or not content.strip():
                continue
            if role == "user":
                role = "tool" if asked else "user"  # the first is the task, the rest observations
                asked = True
            turns.append({"id": f"{session_id}-m{i:04d}", "role": role, "text": content,
                          "createdAt": (start + timedelta(seconds=i)).isoformat()})
        yield "fresh", {"sessionId": session_id, "title": task, "createdAt": start.isoformat(), "turns": turns, "noSummary": True}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=("friends", "swe", "sweagent"))
    parser.add_argument("path", type=Path, help="friends.rda, or a directory of *.traj.json / *.traj")
    parser.add_argument("--out", type=Path, required=True, help="output prefix")
    args = parser.parse_args(argv)
    sessions = {"friends": friends_sessions, "swe": swe_sessions, "sweagent": sweagent_sessions}[args.source](args.path)
    splits = ("fresh",) if args.source == "sweagent" else SPLITS
    counts = dict.fromkeys(splits, 0)
    outputs = {split: args.out.with_name(f"{args.out.name}.{split}.jsonl").open("w", encoding="utf-8") for split in splits}
    try:
        for key, line in sessions:
            split = key if args.source == "sweagent" else split_of(key)
            outputs[split].write(json.dumps(line, ensure_ascii=False) + "\n")
            counts[split] += 1
    finally:
        for handle in outputs.values():
            handle.close()
    print(json.dumps({"source": args.source, "sessions": counts}))


if __name__ == "__main__":
    main()
