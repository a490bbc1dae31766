"""The parts of a coding agent's message: its prose, the commands it runs, the edits it makes.

A coding agent's turn mixes what it says with what it does. This module cuts one message into
zones, so that the offline extractor can tell a name the agent *edits* from a name it only
mentions (issue 11, seventh round):

- ``edit``: what the agent writes into a file — an aider SEARCH/REPLACE block (lines in both halves
  are ``edit-context``: the unchanged code around the change), a whole file written out under its
  name (a fence right after a line that is only a file's name), the body of a shell heredoc
  (``cat <<'EOF' > reproduce.py``), SWE-agent's ``edit N:M`` … ``end_of_edit``;
- ``command``: the rest of a fenced shell block (``grep -n "def run" x.py``);
- ``quote``: any other fenced block (code the agent shows or quotes);
- everything else is ``prose`` (inline code included).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

EDIT_KINDS = frozenset({"edit", "edit-context"})
_FENCE = re.compile(r"```([^\n`]*)\n(.*?)(?:```|\Z)|<source>([^\n]*)\n(.*?)(?:</source>|\Z)", re.S)
_HEREDOC = re.compile(r"<<-?[ \t]*['\"]?(\w+)['\"]?[^\n]*\n(.*?)(?:^[ \t]*\1[ \t]*$|\Z)", re.S | re.M)
_SWE_AGENT_EDIT = re.compile(r"^edit[ \t]+\d+:\d+[^\n]*\n(.*?)(?:^end_of_edit|\Z)", re.S | re.M)
_SEARCH_REPLACE = re.compile(r"^<<<<<<< SEARCH[^\n]*\n.*?(?:^>>>>>>> REPLACE|\Z)", re.S | re.M)
# A line that is only a file's name, right before a fence: the block is that file, written out whole.
_FILE_LINE = re.compile(r"(?:^|\n)[ \t]*[\w.-]*[\w-]+(?:/[\w.-]+)*\.[A-Za-z0-9]{1,8}[ \t]*\n[ \t]*\Z")
_SHELL_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "zsh"})


def _edit_zones(text: str, start: int, end: int) -> list[tuple[int, int, str]]:
    """An edit block's lines: those in both halves of a SEARCH/REPLACE are ``edit-context``."""
    block = text[start:end]
    search_at, divider_at = block.find("<<<<<<< SEARCH"), block.find("=======")
    if search_at < 0 or divider_at < search_at:
        return [(start, end, "edit")]
    replace_end = block.find(">>>>>>> REPLACE", divider_at)
    search = {line.strip() for line in block[search_at:divider_at].splitlines()[1:] if line.strip()}
    replace = {line.strip() for line in block[divider_at : replace_end if replace_end >= 0 else len(block)].splitlines()[1:] if line.strip()}
    zones, at = [], start
    for line in block.splitlines(keepends=True):
        zones.append((at, at + len(line), "edit-context" if line.strip() in search & replace else "edit"))
        at += len(line)
    return zones


def agent_zones(text: str) -> list[tuple[int, int, str]]:
    """The parts of an agent's message that are no prose, in order: ``(start, end, kind)`` with
    kind ``command``, ``edit``, ``edit-context`` or ``quote``."""
    zones: list[tuple[int, int, str]] = []
    if "<<<<<<< SEARCH" in text:
        for match in _SEARCH_REPLACE.finditer(text):
            zones += _edit_zones(text, match.start(), match.end())
    for match in _FENCE.finditer(text) if ("```" in text or "<source>" in text) else ():
        start, end = match.span()
        if "<<<<<<< SEARCH" in text[start:end]:
            zones = [z for z in zones if not start <= z[0] < end] + _edit_zones(text, start, end)
            continue
        if any(start <= z[0] < end for z in zones):
            continue
        if _FILE_LINE.search(text, max(0, start - 300), start):
            zones.append((start, end, "edit"))
            continue
        language = (match.group(1) if match.group(1) is not None else match.group(3) or "").strip().lower()
        if language not in _SHELL_LANGUAGES:
            zones.append((start, end, "quote"))
            continue
        at = start
        bodies = [(m.start(2), m.end()) for m in _HEREDOC.finditer(text, start, end)]
        bodies += [(m.start(1), m.end()) for m in _SWE_AGENT_EDIT.finditer(text, start, end)]
        for body_start, body_end in sorted(bodies):
            if body_start > at:
                zones.append((at, body_start, "command"))
            zones.append((body_start, body_end, "edit"))
            at = max(at, body_end)
        if at < end:
            zones.append((at, end, "command"))
    return sorted(zones)


def zone_at(zones: Sequence[tuple[int, int, str]], position: int) -> str:
    """The kind of the zone holding ``position`` (``prose`` outside every zone)."""
    return next((kind for start, end, kind in zones if start <= position < end), "prose")
