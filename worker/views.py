"""What ``show`` and ``search`` print for a person (``--json`` prints the plain data instead)."""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.markup import escape as escape_markup
from rich.table import Table

from worker.report import output_console

TURN_TEXT_CHARS = 400
# What a terminal acts on instead of showing: control characters but line feed and tab (an escape
# sequence in a turn's tool output or a file name can clear the screen, retitle the window or write
# the clipboard; a carriage return overwrites the line) and the bidirectional overrides and
# isolates (text that reads other than it is stored).
_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def printable(text: str) -> str:
    """``text`` with each character a terminal would act on written as its escape (``\\x1b``,
    ``\\u202e``), as GraphML writes them; ``--json`` carries them as JSON escapes."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def escape(text: str) -> str:
    """``text`` for a rich console: :func:`printable`, and rich's markup characters escaped."""
    return escape_markup(printable(text))


def print_search(rows: Sequence[dict[str, Any]], text: str, *, label: str | None = None, types: Sequence[str] | None = None) -> None:
    """Search hits as a table; none: says so, naming the type ``label`` searched, and the graph's
    knowledge node ``types`` when ``label`` is none of them."""
    console = output_console()
    if not rows:
        unknown = f" (no knowledge node is of type {escape(label)}: the graph's types are {escape(', '.join(types))})" \
            if label and types is not None and label not in types else ""
        console.print(f"no {escape(label) + ' ' if label else ''}node matches {escape(repr(text))}{unknown}")
        return
    table = Table("id", "label", "name", "aliases")
    for row in rows:
        table.add_row(escape(row["id"]), row["label"], escape(row["name"]), escape(", ".join(row["aliases"][:5])))
    console.print(table)


def print_candidates(pairs: Sequence[dict[str, Any]], total: int) -> None:
    """Reported identity pairs, with the command that accepts one."""
    console = output_console()
    if not pairs:
        console.print("no identity candidates to review")
        return
    table = Table("node", "may be", "rule", "score", "session", title=f"identity candidate pairs ({len(pairs)} of {total})")

    for pair in pairs:
        table.add_row(
            _shown(pair["node_id"], pair["node_name"]), _shown(pair["candidate_id"], pair["candidate_name"]),
            pair["rule"], f"{pair['score']:.2f}", escape(pair["session_id"]),
        )
    console.print(table)
    console.print("to merge a pair: rem-cycle merge NODE MAY_BE  (undo: rem-cycle unmerge NODE); two different things: rem-cycle apart NODE MAY_BE")


def _shown(node_id: str, name: str | None) -> str:
    """A node as a listing shows it: its id, and its name when the id does not say it already."""
    return escape(node_id if name is None or node_id.partition(":")[2] == name else f"{node_id} ({name})")


def print_kept_apart(pairs: Sequence[dict[str, Any]], total: int) -> None:
    """The pairs kept apart, with who said so and the command that takes one back."""
    console = output_console()
    if not pairs:
        console.print("no pairs kept apart")
        return
    table = Table("node", "is not", "said by", "at", title=f"pairs kept apart ({len(pairs)} of {total})")
    for pair in pairs:
        table.add_row(_shown(pair["node_id"], pair["node_name"]), _shown(pair["other_id"], pair["other_name"]),
                      pair["decided_by"], pair["created_at"])
    console.print(table)
    console.print("to take one back: rem-cycle apart --undo NODE IS_NOT")


def print_review_sweep(sweep: dict[str, Any]) -> None:
    """What ``candidates --judge`` asked the model and did with its answers."""
    console = output_console()
    for link in sweep["linked"]:
        console.print(f"linked  {escape(link['node'])} -> {escape(link['into'])} (merge #{link['merge_id']}; undo: "
                      f"rem-cycle unmerge {escape(shlex.quote(link['node']))})")
    for apart in sweep["apart"]:
        console.print(f"apart   {escape(apart['node'])} is not {escape(', '.join(apart['from']))} (undo: rem-cycle apart --undo NODE OTHER)")
    for refused in sweep["refused"]:
        console.print(f"refused {escape(refused['node'])} -> {escape(refused['into'])}: {escape(refused['why'])}")
    for node in sweep["unanswered"]:
        console.print(f"no answer about {escape(node)}: its pairs stay listed")
    console.print(f"{sweep['asked']} questions asked: {len(sweep['linked'])} linked, {len(sweep['apart'])} kept apart, "
                  f"{len(sweep['refused'])} refused, {len(sweep['unanswered'])} unanswered"
                  + (f"; {sweep['not_asked']} questions past --limit" if sweep["not_asked"] else "")
                  + (f"; {sweep['cross_type_left']} cross-type pairs not asked (--cross-type asks them)" if sweep["cross_type_left"] else ""))


def print_node(view: dict[str, Any]) -> None:
    """One node: header, description, aliases, edges, sources and the turns it came from."""
    console = output_console()
    if view.get("redirected_from"):
        console.print(f"{escape(view['redirected_from'])} was merged into {escape(view['id'])} (undo: rem-cycle unmerge {escape(shlex.quote(view['redirected_from']))})")
    console.print(f"[bold]{escape(view['name'])}[/bold]  {escape(view['id'])}  ({view['label']})")
    if view.get("description"):
        console.print(escape(view["description"]))
    if view["aliases"]:
        console.print("aliases: " + escape(", ".join(view["aliases"])))
    if view.get("first_seen"):
        console.print(f"first seen {view['first_seen']} · last seen {view['last_seen']}")
    for merge in view.get("merged_from", []):
        console.print(f"merged from {escape(merge['merged_id'])} by {merge['rule']} (score {merge['score']:.2f})")
    if view["edges"]:
        table = Table("dir", "relationship", "node", "name", "weight")
        for edge in view["edges"]:
            arrow = "→" if edge["direction"] == "out" else "←"
            table.add_row(arrow, edge["relationship"], escape(edge["node"]), escape(edge["name"]), f"{edge['weight']:g}")
        console.print(table)
    _more(console, view, "edges")
    for source in view["sources"]:
        console.print(f"from {source['label'].lower()} {escape(source['id'])}: {escape(source['title'])}")
        for quote in source.get("evidence", []):  # a notes file's quotes (it has no turns)
            console.print(f'  [green]evidence:[/green] "{escape(quote)}"')
    _more(console, view, "sources")
    if view.get("turns_error"):
        console.print(f"[yellow]turn texts unavailable: {escape(view['turns_error'])}[/yellow]")
    for turn in view["turns"]:
        where = f"{turn['session'] or '?'} turn {turn['turn_index'] if turn['turn_index'] is not None else '?'}"
        console.print(f"\n[bold]{escape(turn['memory'])}[/bold] ({escape(where)}, {turn['role'] or 'turn'})")
        text = turn["text"]
        if text is None:
            # With the turns unreadable (turns_error, said above) a missing text says nothing of the turn.
            console.print("  (text unavailable: Chroma could not be read)" if view.get("turns_error") else "  (turn not found in Chroma)")
        else:
            shown = text if len(text) <= TURN_TEXT_CHARS else text[:TURN_TEXT_CHARS] + " …"
            console.print("  " + escape(shown).replace("\n", "\n  "))
        for quote in turn["evidence"]:
            console.print(f'  [green]evidence:[/green] "{escape(quote)}"')
    _more(console, view, "turns")


def _more(console: Console, view: dict[str, Any], what: str) -> None:
    """``… N more edges/sources/turns`` when ``show`` printed only the first ones."""
    hidden = view.get(f"{what}_total", 0) - len(view[what])
    if hidden > 0:
        console.print(f"… {hidden} more {what} (rem-cycle show {escape(shlex.quote(view['id']))} --limit 0 for all)")


def print_recall(answer: dict[str, Any]) -> None:
    """A recall answer: facts with their strongest edges, then the turns in rank order, then sessions."""
    console = output_console()
    if not (answer["facts"] or answer["turns"] or answer["sessions"]):
        console.print("nothing recalled")
    for fact in answer["facts"]:
        console.print(f"[bold]{escape(fact['name'])}[/bold] ({escape(fact['id'])}) {escape(fact['description'])}")
        for edge in fact["edges"]:
            console.print(f"  {escape(edge['relationship'])} {escape(edge['other'])} ×{edge['strength']}: "
                          f"“{escape(edge['evidence'])}” ({escape(edge['memory_id'] or edge.get('session_id') or '-')})")
    for turn in answer["turns"]:
        text = " ".join(turn["text"].split())
        shown = text if len(text) <= TURN_TEXT_CHARS else text[:TURN_TEXT_CHARS] + "…"
        console.print(f"[bold]{escape(turn['memory_id'])}[/bold] {escape(turn['session_id'])} #{turn['turn_index']} "
                      f"{escape(turn['role'] or '')} {escape(turn['created_at'] or '')} [{', '.join(turn['signals'])}]")
        console.print(f"  {escape(shown)}")
    for session in answer["sessions"]:
        console.print(f"session {escape(session['id'])}: {escape(session['title'])} — {escape(session['summary'][:TURN_TEXT_CHARS])}")
    if answer["omitted"]:
        console.print(f"({len(answer['omitted'])} more did not fit in {answer['budget_tokens']} tokens)")


def not_known_yet(views: list[dict[str, Any]], wanted: str, as_of: str, *, date_option: str) -> str:
    """Why ``show --as-of`` (and the MCP ``show_node`` with ``as_of``) has no view of ``wanted``,
    which names the nodes ``views`` (as they are now, in the caller's scope: the MCP tool's
    ``user``, the whole graph for the CLI): none was known yet. A knowledge node is known from its first point's turn time, a session
    or a turn from its ``createdAt``, a notes file once something it said was (pipelines/asof.py).
    A knowledge node said only in turns without a ``createdAt`` has no time, and no date shows it:
    that line names the caller's ``date_option`` (the CLI's ``--as-of``, the MCP tool's ``as_of``)."""
    if len(views) > 1:  # a name several nodes hold: each, and since when (as `show NAME` lists them)
        listed = ", ".join(f"{v['id']}{_since(v)}" for v in views)
        return f"no node {wanted!r} was known yet as of {as_of}; {len(views)} have that name now: {listed}"
    view = views[0]
    if _since(view) == _TIMELESS:
        return (f"{view['id']} has no time of its own: no turn that said it has a createdAt, and {date_option} shows only "
                "what was said at a known time")
    return f"{view['id']} was not known yet as of {as_of}{_since(view)}"


_TIMELESS = " (no time of its own)"


def _since(view: dict[str, Any]) -> str:
    """Since when the node ``view`` (as it is now) is known, as `` (first seen …)`` or `` (created
    …)``; :data:`_TIMELESS` for a knowledge node with no time, ``""`` for an anchor without one."""
    from pipelines.vocabulary import ANCHOR_LABELS

    if view["label"] in ANCHOR_LABELS:
        created = view["properties"].get("createdAt")
        return f" (created {created})" if isinstance(created, str) else ""
    return _TIMELESS if view["first_seen"] is None else f" (first seen {view['first_seen']})"
