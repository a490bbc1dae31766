"""Public transcripts → rem-cycle import JSONL, split into a tuning and a held-out half.

Two sources (fetched by the operator, never committed; see bench/RESULTS.md for source + licence):

- ``friends``: the Friends scripts as tidied by EmilHvitfeldt/friends (``data/friends.rda``, MIT,
  from emorynlp/character-mining, Apache-2.0). One session per scene (a conversation between named
  people); a turn's role is the speaker's name. Scene directions are dropped (nobody says them).
- ``office``: The Office (US) scripts as tidied by bradlindblad/schrute (``data/theoffice.rda``,
  MIT). The scripts have no scene numbers, so a session is a window of 30 consecutive spoken lines
  of one episode (an episode's last window joins the one before it if it has fewer than 10 lines);
  a turn's role is the speaker's name as the data gives it (``Michael``, ``Todd Packer``,
  ``Michael and Dwight``), its text the spoken ``text`` (not ``text_w_direction``); empty texts
  (lines that were only a stage direction) are dropped. Split by episode, like friends.
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

The split is by a hash of the episode (friends, office) or the task id (swe), fixed before any labelling::

    python -m bench.convert_transcripts friends /tmp/qe-data/friends.rda --out /tmp/qe-data/friends
    python -m bench.convert_transcripts office /tmp/q3/office/theoffice.rda --out /tmp/q3/data2/office
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
from collections.abc import Iterator, Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SPLITS = ("tune", "heldout")
_EPOCH = datetime(2026, 1, 1, tzinfo=timezone.utc)
_NOT_SPOKEN = {"Scene Directions"}
# The Office: a session is this many consecutive spoken lines of an episode; an episode's last
# window shorter than OFFICE_LEAST joins the one before it.
OFFICE_WINDOW = 30
OFFICE_LEAST = 10


def split_of(key: str) -> str:
    """``tune`` or ``heldout``: a fixed function of the key, so nobody picks the held-out half."""
    return SPLITS[hashlib.sha256(key.encode()).digest()[0] % 2]


def _script_lines(rda_path: Path, frame_name: str, key: Sequence[str], number: str, speaker: str) -> dict[tuple[int, ...], list[tuple[int, str, str]]]:
    """The spoken lines of a tidy script data frame (an R ``.rda``), grouped by its ``key``
    columns in order: (line number, speaker, text) sorted by line number. Scene directions and
    empty texts are dropped (nobody says them); a speaker's name loses surrounding spaces."""
    import rdata  # only the chat converters need it: pip install rdata

    frame = rdata.read_rda(str(rda_path))[frame_name]
    groups: dict[tuple[int, ...], list[tuple[int, str, str]]] = {}
    for *group, line, name, text in frame[[*key, number, speaker, "text"]].itertuples(index=False):
        if name in _NOT_SPOKEN or not isinstance(text, str) or not text.strip():
            continue
        groups.setdefault(tuple(int(k) for k in group), []).append((int(line), str(name).strip(), text))
    return {group: sorted(lines) for group, lines in sorted(groups.items())}


def _chat_session(session_id: str, number: int, lines: Sequence[tuple[int, str, str]]) -> dict[str, Any]:
    """The import line of one conversation between named people: a turn per (line number,
    speaker, text), the speaker's name as its role; the ``number``-th session starts a day after
    the one before it."""
    start = _EPOCH + timedelta(days=number)
    turns = [
        {"id": f"{session_id}-u{utterance:04d}", "role": speaker[:64], "text": text,
         "createdAt": (start + timedelta(seconds=i)).isoformat()}
        for i, (utterance, speaker, text) in enumerate(lines)
    ]
    return {"sessionId": session_id, "title": session_id, "createdAt": start.isoformat(), "turns": turns, "noSummary": True}


def friends_sessions(rda_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(split key, import line) per scene of the Friends scripts."""
    scenes = _script_lines(rda_path, "friends", ("season", "episode", "scene"), "utterance", "speaker")
    for number, ((season, episode, scene), lines) in enumerate(scenes.items()):
        yield f"friends-s{season:02d}e{episode:02d}", _chat_session(f"friends-s{season:02d}e{episode:02d}-c{scene:02d}", number, lines)


def windows(lines: Sequence[Any], size: int = OFFICE_WINDOW, least: int = OFFICE_LEAST) -> list[list[Any]]:
    """``lines`` cut into windows of ``size`` consecutive lines; a last window shorter than
    ``least`` joins the one before it (a few closing lines are no conversation of their own)."""
    cut = [list(lines[at:at + size]) for at in range(0, len(lines), size)]
    if len(cut) > 1 and len(cut[-1]) < least:
        tail = cut.pop()
        cut[-1] += tail
    return cut


def office_sessions(rda_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    """(split key, import line) per window of :data:`OFFICE_WINDOW` spoken lines of an episode of
    The Office (the scripts have no scene numbers; ``index`` numbers the lines of the series)."""
    episodes = _script_lines(rda_path, "theoffice", ("season", "episode"), "index", "character")
    parts = [(season, episode, window, part) for (season, episode), lines in episodes.items()
             for window, part in enumerate(windows(lines))]
    for number, (season, episode, window, part) in enumerate(parts):
        yield f"office-s{season:02d}e{episode:02d}", _chat_session(f"office-s{season:02d}e{episode:02d}-w{window:02d}", number, part)


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
    parser.add_argument("source", choices=("friends", "office", "swe", "sweagent", "aider"))
    parser.add_argument("path", type=Path, help="friends.rda, theoffice.rda, a directory of *.traj.json / *.traj, or an aider chat history")
    parser.add_argument("--out", type=Path, required=True, help="output prefix")
    parser.add_argument("--all", action="store_true", help="every session in one file, <out>.jsonl (no split)")
    args = parser.parse_args(argv)
    sessions = {"friends": friends_sessions, "office": office_sessions, "swe": swe_sessions, "sweagent": sweagent_sessions, "aider": aider_sessions}[args.source](args.path)
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
