"""The ``rem-cycle`` command line.

``rem-cycle`` runs the daemon; ``rem-cycle --once`` runs one cycle; subcommands operate on the
data dir (``import``, ``status`` …). Every command takes ``--config FILE`` and ``--json``.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any

import anyio

from config import ConfigError, Settings, load_settings
from worker.cycle import EXIT_BUSY, EXIT_FAILED, EXIT_OK, CycleBusyError, open_stores, run_cycle
from worker.logs import configure_logging

EXIT_USAGE = 2
# Edges and turns ``show`` prints by default: a node mentioned in thousands of turns stays readable.
SHOW_LIMIT = 20

Handler = Callable[[Settings, argparse.Namespace], Awaitable[int]]


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS so a value given before the subcommand is not reset by the subparser's default.
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="TOML settings file")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="rem-cycle",
        description="Consolidate agent memories in Chroma into an SQLite knowledge graph.",
        parents=[common],
    )
    parser.add_argument("--once", action="store_true", help="run one REM cycle and exit (non-zero when it failed)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    imp = sub.add_parser("import", parents=[common], help="write sessions from a JSONL file into Chroma")
    imp.add_argument("file", help="JSONL file, one session per line (see README)")
    status = sub.add_parser("status", parents=[common], help="recent runs, backlog and graph counts")
    status.add_argument("--runs", type=int, default=10, help="how many recent runs to show")
    retry = sub.add_parser("retry", parents=[common], help="make failed / undigestible sessions eligible again now")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", metavar="ID", action="append", help="a session id (repeatable)")
    which.add_argument("--all", action="store_true", help="every undigestible session and every failed chunk")
    export = sub.add_parser("export", parents=[common], help="graph snapshot as JSON or GraphML")
    export.add_argument("--format", choices=("json", "graphml"), default="json", help="output format (default json)")
    export.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    export.add_argument(
        "--include-anchors", action="store_true", help="also export MEMORY/SESSION/NOTE nodes and provenance edges"
    )
    as_of_help = "the graph as known at DATE (2026-11-15, end of day UTC) or an ISO 8601 time"
    export.add_argument("--as-of", type=_as_of, metavar="DATE", help=as_of_help)
    show = sub.add_parser("show", parents=[common], help="one node: aliases, edges, and the turns it came from")
    show.add_argument("--as-of", type=_as_of, metavar="DATE", help=as_of_help)
    show.add_argument("node_id", metavar="NODE_ID", help="e.g. CLASS:LazyEdgeQueue (or an exact name)")
    show.add_argument(
        "--limit", type=_non_negative_int, default=SHOW_LIMIT,
        help=f"at most this many edges (heaviest first) and turns (default {SHOW_LIMIT}; 0: all)",
    )
    search = sub.add_parser("search", parents=[common], help="find nodes by name or alias (case-insensitive)")
    search.add_argument("text", metavar="TEXT")
    search.add_argument("--label", help="only nodes with this label, e.g. CLASS")
    search.add_argument("--limit", type=int, default=50)
    search.add_argument("--as-of", type=_as_of, metavar="DATE", help=as_of_help)
    backup = sub.add_parser("backup", parents=[common], help="copy the graph database (safe while the daemon runs)")
    backup.add_argument("path", help="destination file (replaced atomically when the copy is sound)")
    unmerge = sub.add_parser("unmerge", parents=[common], help="undo the merges of a node (restores it, its edges and aliases)")
    unmerge.add_argument("node_id", metavar="NODE_ID", help="the node that was merged away")
    candidates = sub.add_parser(
        "candidates", parents=[common], help="pairs identity resolution found ambiguous and did not merge, to review"
    )
    candidates.add_argument("--limit", type=int, default=50)
    merge = sub.add_parser("merge", parents=[common], help="fold one node into another by hand (recorded, undoable)")
    merge.add_argument("merged_id", metavar="NODE_ID")
    merge.add_argument("into_id", metavar="INTO_ID")
    forget = sub.add_parser(
        "forget", parents=[common], help="remove a session, turn or notes file from the graph (tombstoned: not brought back)"
    )
    what = forget.add_mutually_exclusive_group(required=True)
    what.add_argument("--session", metavar="ID", help="a session id")
    what.add_argument("--memory", metavar="ID", help="a memory (turn) id, with or without memory:")
    what.add_argument("--note", metavar="PATH", help="an imported notes file, by the path it was imported from")
    forget.add_argument("--dry-run", action="store_true", help="report what would be removed; change nothing")
    notes = sub.add_parser("import-notes", parents=[common], help="extract Markdown/text notes files into the graph")
    notes.add_argument("paths", nargs="+", metavar="PATH", help="files, or folders searched for *.md / *.txt")
    drain = sub.add_parser("drain", parents=[common], help="link queued lazy edges, back-filling their endpoints")
    drain.add_argument("--dry-run", action="store_true", help="read the queue and report; change nothing")
    backfill = sub.add_parser(
        "backfill", parents=[common], help="live-sync recent sessions, then drain the lazy-edge queue"
    )
    backfill.add_argument("--days", type=_positive_days, default=30.0, help="window in days (default 30)")
    backfill.add_argument("--dry-run", action="store_true", help="count what would be synced; change nothing")
    backfill.add_argument("--skip-drain", action="store_true", help="do not drain the lazy-edge queue afterwards")
    return parser


def _as_of(value: str) -> str:
    from pipelines.asof import AsOfError, parse_as_of

    try:
        return parse_as_of(value)
    except AsOfError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _non_negative_int(value: str) -> int:
    try:
        number = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return number


def _positive_days(value: str) -> float:
    try:
        days = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {value!r}") from None
    if not 0 < days < 100_000:
        raise argparse.ArgumentTypeError("must be a positive number of days")
    return days


@contextmanager
def _progress_bar(args: argparse.Namespace, description: str) -> Iterator[Callable[[int, int], None] | None]:
    """A rich progress bar on stderr when it is a terminal (and no ``--json``); else no callback."""
    if getattr(args, "json", False) or not sys.stderr.isatty():
        yield None
        return
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total or None)


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: Callable[[], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=None, sort_keys=True, default=str))
    else:
        text()


async def cmd_once(settings: Settings, args: argparse.Namespace) -> int:
    from worker.daemon import stop_on_signals

    result = None
    try:
        async with stop_on_signals(grace_seconds=settings.grace_seconds) as stop:
            result = await run_cycle(settings, reason="manual", mode="once", stop=stop)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; not starting a second one", file=sys.stderr)
        return EXIT_BUSY
    if result is None:  # cancelled after the grace time; the run is recorded interrupted
        print("rem-cycle: stopped before the cycle finished (recorded as interrupted)", file=sys.stderr)
        return EXIT_OK

    def text() -> None:
        from worker.report import print_cycle

        print_cycle(result.as_dict())

    _emit(args, result.as_dict(), text)
    return result.exit_code


async def cmd_import(settings: Settings, args: argparse.Namespace) -> int:
    from pipelines.importer import import_sessions
    from store.chroma import ChromaStore

    chroma = await ChromaStore.connect(settings)
    stats = await import_sessions(
        args.file,
        chroma=chroma,
        memory_collection=settings.memory_collection,
        summary_collection=settings.session_collection,
    )
    payload = stats.as_dict()

    def text() -> None:
        print(
            f"imported {stats.sessions} sessions from {stats.lines} lines: "
            f"{stats.memories_written} memories written ({stats.memories_unchanged} unchanged), "
            f"{stats.summaries_written} summaries written ({stats.summaries_unchanged} unchanged)"
        )
        for bad in stats.bad_lines[:50]:
            print(f"  line {bad['line']}: {bad['error']}", file=sys.stderr)

    _emit(args, payload, text)
    return EXIT_OK if not stats.bad_lines else EXIT_FAILED


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from worker.report import collect_status, print_status

    stores = await open_stores(settings)
    try:
        payload = await anyio.to_thread.run_sync(lambda: collect_status(settings, stores, runs=args.runs))
    finally:
        stores.close()
    _emit(args, payload, lambda: print_status(payload))
    return EXIT_OK


async def cmd_retry(settings: Settings, args: argparse.Namespace) -> int:
    from worker.report import reset_failures

    stores = await open_stores(settings)
    try:
        payload = await anyio.to_thread.run_sync(lambda: reset_failures(stores, None if args.all else args.session))
    finally:
        stores.close()
    _emit(
        args,
        payload,
        lambda: print(f"reset {payload['sessions_reset']} sessions and {payload['chunks_reset']} failed chunks; "
                      "the next cycle tries them again"),
    )
    return EXIT_OK


async def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    from pipelines.export import render
    from worker.knowledge import open_graph_db, snapshot_from_db

    def build() -> dict[str, Any]:
        with open_graph_db(settings) as db:
            return snapshot_from_db(db, include_anchors=args.include_anchors, as_of=args.as_of)

    snapshot = await anyio.to_thread.run_sync(build)
    text = render(snapshot, args.format)
    if not args.out:
        sys.stdout.write(text)
        return EXIT_OK
    await anyio.Path(args.out).write_text(text, encoding="utf-8")
    _emit(
        args,
        {"out": args.out, "format": args.format, **snapshot["counts"]},
        lambda: print(f"wrote {args.out} ({args.format}): {_counts_line(snapshot['counts'])}", file=sys.stderr),
    )
    return EXIT_OK


async def cmd_search(settings: Settings, args: argparse.Namespace) -> int:
    from worker.knowledge import search_graph
    from worker.views import print_search

    rows = await anyio.to_thread.run_sync(
        lambda: search_graph(settings, args.text, limit=args.limit, label=args.label and args.label.upper(), as_of=args.as_of)
    )
    _emit(args, {"query": args.text, "results": rows}, lambda: print_search(rows, args.text))
    return EXIT_OK


async def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    from store.ids import InvalidIdError
    from worker.knowledge import search_graph, show_node
    from worker.views import print_node

    try:
        view = await show_node(settings, args.node_id, limit=args.limit or None, as_of=args.as_of)
    except InvalidIdError as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if view is None:
        # Not an id: an exact (case-insensitive) name or alias of exactly one node is good enough.
        hits = await anyio.to_thread.run_sync(lambda: search_graph(settings, args.node_id, limit=20, as_of=args.as_of))
        exact = [h for h in hits if args.node_id.casefold() in {a.casefold() for a in [h["name"], *h["aliases"]]}]
        view = await show_node(settings, exact[0]["id"], limit=args.limit or None, as_of=args.as_of) if len(exact) == 1 else None
        if view is None:
            suggestions = ", ".join(h["id"] for h in (exact or hits)[:10])
            print(f"rem-cycle: no node {args.node_id!r}" + (f"; did you mean: {suggestions}" if suggestions else ""), file=sys.stderr)
            return EXIT_FAILED
    _emit(args, view, lambda: print_node(view))
    return EXIT_OK


async def cmd_unmerge(settings: Settings, args: argparse.Namespace) -> int:
    from store.ids import InvalidIdError
    from store.merges import MergeError
    from worker.knowledge import unmerge_node

    from worker.cycle import single_flight

    try:
        # A cycle's identity resolution keeps its own view of the graph: never change it under one.
        async with single_flight(settings):
            undone = await anyio.to_thread.run_sync(unmerge_node, settings, args.node_id)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; unmerge when it has finished", file=sys.stderr)
        return EXIT_BUSY
    except (MergeError, InvalidIdError) as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_FAILED

    def text() -> None:
        for item in undone:
            print(
                f"restored {args.node_id} (was merged into {item['into']}, merge #{item['merge_id']}): "
                f"{item['edges_relinked']} edges back, {item['edges_deleted']} merged edges removed, "
                f"{item['edges_culled']} culled (endpoint gone)"
            )

    _emit(args, {"node": args.node_id, "undone": undone}, text)
    return EXIT_OK


async def cmd_candidates(settings: Settings, args: argparse.Namespace) -> int:
    from worker.knowledge import identity_candidates
    from worker.views import print_candidates

    pairs, total = await anyio.to_thread.run_sync(lambda: identity_candidates(settings, limit=args.limit))
    _emit(args, {"candidates": pairs, "total": total}, lambda: print_candidates(pairs, total))
    return EXIT_OK


async def cmd_merge(settings: Settings, args: argparse.Namespace) -> int:
    from store.ids import InvalidIdError
    from store.merges import MergeError
    from worker.knowledge import merge_node

    from worker.cycle import single_flight

    try:
        async with single_flight(settings):
            merge_id = await anyio.to_thread.run_sync(merge_node, settings, args.merged_id, args.into_id)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; merge when it has finished", file=sys.stderr)
        return EXIT_BUSY
    except (MergeError, InvalidIdError) as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_FAILED
    _emit(
        args,
        {"merge_id": merge_id, "merged": args.merged_id, "into": args.into_id},
        lambda: print(f"merged {args.merged_id} into {args.into_id} (merge #{merge_id}; undo: rem-cycle unmerge {args.merged_id})"),
    )
    return EXIT_OK


async def cmd_forget(settings: Settings, args: argparse.Namespace) -> int:
    from store.ids import InvalidIdError
    from worker.cycle import single_flight
    from worker.knowledge import NoGraphError, forget

    try:
        async with single_flight(settings):
            report = await anyio.to_thread.run_sync(
                lambda: forget(settings, session=args.session, memory=args.memory, note=args.note, dry_run=args.dry_run)
            )
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; forget when it has finished", file=sys.stderr)
        return EXIT_BUSY
    except (InvalidIdError, NoGraphError) as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_FAILED

    def text() -> None:
        verb = "would remove" if report["dry_run"] else "removed"
        print(
            f"{verb} {report['kind']} {report['id']}: {report['points']} provenance points, {report['nodes_removed']} nodes "
            f"({len(report['knowledge_nodes_removed'])} knowledge nodes left without support), {report['edges_removed']} edges"
            + ("; tombstoned" if report.get("tombstone") and not report["dry_run"] else "")
        )

    _emit(args, report, text)
    return EXIT_OK


async def cmd_import_notes(settings: Settings, args: argparse.Namespace) -> int:
    from worker.cycle import single_flight
    from worker.knowledge import import_notes

    try:
        async with single_flight(settings):
            report = await import_notes(settings, args.paths)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; import the notes when it has finished", file=sys.stderr)
        return EXIT_BUSY

    def text() -> None:
        for item in report["files"]:
            detail = f"{item['nodes_written']} nodes, {item['edges_written']} edges written" if item["status"] == "imported" else item["error"] or ""
            print(f"{item['status']:9} {item['path']} ({item['note_id']}) {detail}".rstrip())
        for error in report["errors"]:
            print(f"error     {error}", file=sys.stderr)
        print(f"{report['imported']} imported, {report['unchanged']} unchanged, {report['failed']} failed")

    _emit(args, report, text)
    return EXIT_OK if not report["failed"] and not report["errors"] else EXIT_FAILED


def _counts_line(counts: dict[str, Any]) -> str:
    return ", ".join(f"{v} {k}" for k, v in counts.items())


async def cmd_backup(settings: Settings, args: argparse.Namespace) -> int:
    from store.db import backup_database

    if not settings.graph_path.exists():
        print(f"rem-cycle: no graph database at {settings.graph_path}", file=sys.stderr)
        return EXIT_FAILED
    try:
        payload = await anyio.to_thread.run_sync(backup_database, settings.graph_path, args.path)
    except sqlite3.Error as exc:
        print(f"rem-cycle: backup failed: {exc}", file=sys.stderr)
        return EXIT_FAILED
    _emit(args, payload, lambda: print(f"backed up {settings.graph_path} to {payload['path']} ({payload['bytes']} bytes, integrity ok)"))


async def _drain_once(settings: Settings, stores: Any, args: argparse.Namespace) -> dict[str, Any]:
    from worker.cycle import drain_lazy_edges

    with _progress_bar(args, "draining lazy edges") as on_progress:
        stats = await drain_lazy_edges(settings, stores, dry_run=args.dry_run, on_progress=on_progress)
    return stats.as_dict()


async def cmd_drain(settings: Settings, args: argparse.Namespace) -> int:
    from store.lazy_queue import QueueBusyError
    from worker.report import print_drain

    stores = await open_stores(settings)
    try:
        payload = await _drain_once(settings, stores, args)
    except QueueBusyError as exc:
        print(f"rem-cycle: {exc}; not starting a second one", file=sys.stderr)
        return EXIT_BUSY
    finally:
        stores.close()
    _emit(args, payload, lambda: print_drain(payload))
    return EXIT_OK


async def cmd_backfill(settings: Settings, args: argparse.Namespace) -> int:
    from datetime import UTC, datetime

    from pipelines.backfill import sync_recent_sessions
    from store.lazy_queue import QueueBusyError
    from worker.cycle import SESSIONS_PER_BATCH
    from worker.report import print_backfill

    stores = await open_stores(settings)
    try:
        with _progress_bar(args, "syncing sessions") as on_progress:
            recent = await sync_recent_sessions(
                chroma=stores.chroma,
                graph=stores.graph,
                memory_collection=settings.memory_collection,
                summary_collection=settings.session_collection,
                now=datetime.now(UTC),
                days=args.days,
                dry_run=args.dry_run,
                sessions_per_batch=SESSIONS_PER_BATCH,
                on_progress=on_progress,
            )
        payload: dict[str, Any] = {**recent.as_dict(), "drain": None}
        if not args.skip_drain:
            try:
                payload["drain"] = await _drain_once(settings, stores, args)
            except QueueBusyError as exc:
                print(f"rem-cycle: {exc}; sessions synced, drain skipped", file=sys.stderr)
                payload["drain"] = {"skipped": "busy"}
    finally:
        stores.close()
    _emit(args, payload, lambda: print_backfill(payload))
    return EXIT_OK


async def cmd_daemon(settings: Settings, args: argparse.Namespace) -> int:
    from worker.daemon import run_daemon

    try:
        return await run_daemon(settings)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; not starting a second one", file=sys.stderr)
        return EXIT_BUSY
    except (OSError, sqlite3.Error) as exc:  # e.g. the HTTP port is taken, the data dir is not writable
        print(f"rem-cycle: cannot start the daemon: {exc}", file=sys.stderr)
        return EXIT_FAILED


COMMANDS: dict[str, Handler] = {
    "import": cmd_import,
    "status": cmd_status,
    "retry": cmd_retry,
    "export": cmd_export,
    "show": cmd_show,
    "search": cmd_search,
    "backup": cmd_backup,
    "unmerge": cmd_unmerge,
    "candidates": cmd_candidates,
    "merge": cmd_merge,
    "forget": cmd_forget,
    "drain": cmd_drain,
    "backfill": cmd_backfill,
    "import-notes": cmd_import_notes,
}


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rem-cycle`` console script."""
    args = build_parser().parse_args(argv)
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    secrets = [s.get_secret_value() for s in (settings.chroma_token, settings.llm_api_key, settings.embedding_api_key) if s]
    configure_logging(level=settings.log_level, fmt=settings.log_format, secrets=secrets)
    if args.command:
        handler = COMMANDS[args.command]
    else:
        handler = cmd_once if args.once else cmd_daemon
    try:
        return anyio.run(handler, settings, args)
    except KeyboardInterrupt:
        return EXIT_OK
    except Exception as exc:  # noqa: BLE001 - a clear one-line error instead of a traceback
        from store.chroma import ChromaUnavailableError

        # Environment problems (unreachable Chroma, missing or unsafe files, a damaged database)
        # are the operator's to fix: say what is wrong in one line. Anything else is a bug: raise.
        if isinstance(exc, (ChromaUnavailableError, OSError, sqlite3.DatabaseError)):
            print(f"rem-cycle: {exc}", file=sys.stderr)
            return EXIT_FAILED
        raise
