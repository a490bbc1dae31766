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
- ``aider``: aider's own chat history (``tests/fixtures/chat-history.md`` in the aider repository,
  Apache-2.0) — one session per ``# aider chat started at …``; ``#### `` lines are the person's
  (``user``), ``> `` lines aider's own output (``tool``: commands, diffs applied, lint and test
  output), the rest the model's answer (``assistant``; a fenced block stays with it). All held out
  (split ``fresh``).

The split is by a hash of the episode (friends) or the task id (swe), fixed before any labelling::

    python -m bench.convert_transcripts friends /tmp/qe-data/friends.rda --out /tmp/qe-data/friends
    python -m bench.convert_transcripts swe /tmp/qe-data/trajs --out /tmp/qe-data/swe

writes ``<out>.tune.jsonl`` and ``<out>.heldout.jsonl``; ``--all`` writes every session to one
file ``<out>.jsonl`` instead (the identity benchmark's ``--sessions`` splits it itself, by
:func:`split_of` of each session's title). This is the only mini-swe-agent converter (issue 11's
round 4 folded ``bench/real_sessions.py`` into it)::

    python -m bench.convert_transcripts swe /tmp/msa/swebench_results/20251118_gemini-3-pro-74pct/trajs --out /tmp/q3/all --all
    python bench/bench_identity.py --sessions /tmp/q3/all.jsonl
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
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


# aider commands whose answer is the model's, not a command's output.
_AIDER_MODEL_COMMANDS = frozenset({"ask", "code", "architect", "help", "chat-mode", "context"})


def aider_sessions(history: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(``fresh``, import line) per session of an aider chat history (``.aider.chat.history.md``)
    that has at least one message from the person."""
    text = history.read_text(encoding="utf-8")
    for number, block in enumerate(re.split(r"^# aider chat started at ", text, flags=re.M)[1:]):
        stamp, _, body = block.partition("\n")
        session_id = f"aider-{number:04d}-" + re.sub(r"[^0-9]", "", stamp)[:14]
        start = _EPOCH + timedelta(days=number)
        turns: list[dict[str, Any]] = []
        role, lines, fenced = "", [], False
        # After `/run x` or `/test x` aider prints the output bare, then quoted again as it goes to
        # the chat ("> …"); only after that quoted copy does the model answer.
        output, seen_bare, quoted_again = False, False, False

        def flush() -> None:
            content = "\n".join(lines).strip()
            if role and content:
                turns.append({"id": f"{session_id}-t{len(turns):04d}", "role": role, "text": content,
                              "createdAt": (start + timedelta(seconds=len(turns))).isoformat()})

        for line in body.splitlines():
            if fenced:
                kind = role
            elif line.startswith("#### "):
                kind, line = "user", line[5:]
                output = line.startswith("/") and line[1:].split(" ", 1)[0] not in _AIDER_MODEL_COMMANDS
                seen_bare = quoted_again = False
            elif line.startswith(">") and not (output and seen_bare and not quoted_again and line.startswith(">  ")):
                kind, line = "tool", line[1:].removeprefix(" ")
                quoted_again = quoted_again or (output and seen_bare)
            elif not line.strip():
                kind = role  # a blank line stays with what it separates
            elif output and not quoted_again:
                kind, seen_bare = "tool", True  # bare output, pytest's `>   failing line` too
            else:
                kind, output = "assistant", False
            if line.lstrip().startswith("```") and kind == "assistant":
                fenced = not fenced
            if kind != role:
                flush()
                role, lines = kind, []
            lines.append(line.rstrip())
        flush()
        if any(t["role"] == "user" for t in turns):
            yield "fresh", {"sessionId": session_id, "title": stamp.strip(), "createdAt": start.isoformat(), "turns": turns, "noSummary": True}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("source", choices=("friends", "swe", "sweagent", "aider"))
    parser.add_argument("path", type=Path, help="friends.rda, a directory of *.traj.json / *.traj, or an aider chat history")
    parser.add_argument("--out", type=Path, required=True, help="output prefix")
    parser.add_argument("--all", action="store_true", help="every session in one file, <out>.jsonl (no split)")
    args = parser.parse_args(argv)
    sessions = {"friends": friends_sessions, "swe": swe_sessions, "sweagent": sweagent_sessions, "aider": aider_sessions}[args.source](args.path)
    held_out = args.source in ("sweagent", "aider")  # every session held out
    splits = ("all",) if args.all else ("fresh",) if held_out else SPLITS
    counts = dict.fromkeys(splits, 0)
    name = "{}.jsonl" if args.all else "{}.{}.jsonl"
    outputs = {split: args.out.with_name(name.format(args.out.name, split)).open("w", encoding="utf-8") for split in splits}
    try:
        for key, line in sessions:
            split = "all" if args.all else key if held_out else split_of(key)
            outputs[split].write(json.dumps(line, ensure_ascii=False) + "\n")
            counts[split] += 1
    finally:
        for handle in outputs.values():
            handle.close()
    print(json.dumps({"source": args.source, "sessions": counts}))


if __name__ == "__main__":
    main()
