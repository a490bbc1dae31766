"""Real coding-agent sessions for the quality benchmarks: mini-SWE-agent trajectories → the JSONL
that ``rem-cycle import`` reads, split into a tuning half and a held-out half.

    python bench/real_sessions.py TRAJ_DIR OUT.jsonl [--split tuning|held-out|all] [--limit N]
    # or REM_BENCH_TRAJS=TRAJ_DIR python bench/real_sessions.py - OUT.jsonl

``TRAJ_DIR`` is searched for ``*.traj.json`` files (mini-SWE-agent format: ``instance_id`` and
``messages`` with ``role``/``content``). The source used in bench/RESULTS.md is the public
gruckion/mini-swe-agent repository (MIT), folder ``swebench_results/20251118_gemini-3-pro-74pct/trajs``
— 500 SWE-bench Verified runs of mini-SWE-agent with Gemini 3 Pro. Nothing of it is committed:

    git clone https://github.com/gruckion/mini-swe-agent /tmp/msa
    python bench/real_sessions.py /tmp/msa/swebench_results/20251118_gemini-3-pro-74pct/trajs sessions.jsonl

The system prompt is dropped; the task (first user message) stays a ``user`` turn, every later
``user`` message (command output, format errors, timeouts, the submitted diff) becomes a ``tool``
turn, the agent's messages are ``assistant`` turns. The split is fixed by the instance id alone (:func:`split_of`), so it never
depends on what the rules do and a held-out session never moves to the tuning side.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

TUNING = "tuning"
HELD_OUT = "held-out"
_SESSION_ID = re.compile(r"[^A-Za-z0-9_.-]+")
_EPOCH = datetime(2025, 11, 18, tzinfo=UTC)


def split_of(instance_id: str) -> str:
    """``tuning`` or ``held-out`` for a session, from the SHA-256 of its instance id (half each)."""
    return HELD_OUT if hashlib.sha256(instance_id.encode()).digest()[0] % 2 else TUNING


def session_id_of(instance_id: str) -> str:
    """The rem-cycle session id of a trajectory (``swe-`` + the instance id, safe characters)."""
    return "swe-" + _SESSION_ID.sub("-", instance_id)


def _role(message: dict[str, Any], position: int) -> str:
    # Only the first user message is the task; every later one is the environment's (command
    # output, a format error, a timeout notice, the submitted diff).
    if message.get("role") == "user" and position > 0:
        return "tool"
    return str(message.get("role") or "user")


def convert(path: Path, *, number: int) -> dict[str, Any] | None:
    """One trajectory file as one import line (None when it holds no conversation)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    instance = str(data.get("instance_id") or path.name.removesuffix(".traj.json"))
    messages = [m for m in data.get("messages", []) if isinstance(m, dict) and m.get("role") != "system"]
    if not messages:
        return None
    session = session_id_of(instance)
    start = _EPOCH + timedelta(minutes=number)
    turns = []
    for position, message in enumerate(messages):
        content = message.get("content")
        if isinstance(content, list):  # content parts
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if not str(content or "").strip():
            continue
        turns.append({
            "id": f"{session}-t{position:04d}",
            "role": _role(message, position),
            "text": str(content),
            "createdAt": (start + timedelta(seconds=position)).isoformat().replace("+00:00", "Z"),
        })
    return {
        "sessionId": session,
        "title": instance,
        "createdAt": start.isoformat().replace("+00:00", "Z"),
        "userId": "swe-bench",
        "noSummary": True,
        "turns": turns,
    }


def trajectories(root: Path) -> Iterator[Path]:
    """The ``*.traj.json`` files under ``root``, in a stable order."""
    yield from sorted(root.rglob("*.traj.json"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="folder of *.traj.json files ('-' = $REM_BENCH_TRAJS)")
    parser.add_argument("out", type=Path)
    parser.add_argument("--split", choices=(TUNING, HELD_OUT, "all"), default="all")
    parser.add_argument("--limit", type=int, default=0, help="at most this many sessions (0 = all)")
    args = parser.parse_args(argv)
    source = os.environ.get("REM_BENCH_TRAJS", "") if args.source == "-" else args.source
    root = Path(source)
    if not source or not root.is_dir():
        print(f"not a folder of trajectories: {source!r}", file=sys.stderr)
        return 2
    written = 0
    with args.out.open("w", encoding="utf-8") as out:
        for number, path in enumerate(trajectories(root)):
            instance = path.name.removesuffix(".traj.json")
            if args.split != "all" and split_of(instance) != args.split:
                continue
            line = convert(path, number=number)
            if line is None:
                continue
            out.write(json.dumps(line, ensure_ascii=False) + "\n")
            written += 1
            if args.limit and written >= args.limit:
                break
    print(f"{written} sessions → {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
