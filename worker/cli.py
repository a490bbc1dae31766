"""The ``rem-cycle`` command line.

``rem-cycle`` runs the daemon; ``rem-cycle --once`` runs one cycle; subcommands operate on the
data dir (``import``, ``status`` …). Every command takes ``--config FILE`` and ``--json``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import stat
import tempfile
from importlib.metadata import PackageNotFoundError, version
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, BinaryIO, TextIO, TypeVar, cast

import anyio

from config import ConfigError, Settings, idle_settings, load_settings, unknown_environment
from config.redact import redact, remember_secrets, secret_values
from pipelines.recall import MAX_BUDGET_TOKENS, MAX_LIMIT
from store.durable import replace_file
from store.errors import DatabaseDamagedError, StoreError
from store.lazy_queue import MAX_LINE_BYTES
from store.library_log import get_logger
from worker.cycle import EXIT_BUSY, EXIT_FAILED, EXIT_OK, CycleBusyError, CycleResult, open_stores, run_cycle
from worker.entry import interrupted
from worker.failures import damage_message
from worker.logs import configure_logging
from worker.signals import CommandProgress, interruptible

EXIT_USAGE = 2
# Commands that read or change an existing graph: on a graph database that is not there they say
# so (with the resolved path) and fail, rather than create an empty one and report on nothing.
# ``drain`` links queued lines into the graph a cycle made (the cycle drains what waits for it).
# The cycle, ``import``, ``import-notes``, ``restore`` and ``backfill`` (a live sync of sessions,
# an ingest) create one; ``mcp`` serves without one: its tools say so until a cycle creates it.
GRAPH_COMMANDS = frozenset({
    "status", "search", "show", "export", "candidates", "retry", "merge", "unmerge", "apart", "backup", "forget", "recall",
    "reindex", "drain",
})
# ``enqueue`` writes the queue file or table in an existing data dir, graph or not.
DATA_DIR_COMMANDS = GRAPH_COMMANDS | {"enqueue"}
EPILOG = """\
Without a COMMAND, rem-cycle runs the daemon (a cycle every REM_INTERVAL_SECONDS until SIGTERM or
Ctrl-C); no COMMAND starts or talks to a daemon. Every command works on the data dir
REM_DATA_DIR (default ./.rem-data), which holds the graph database graph.sqlite3 (unless
REM_DATABASE_URL names a PostgreSQL database), the lazy-edge queue and, without REM_CHROMA_URL,
the embedded Chroma; here (unless --config sets data_dir):
  {data_dir}
Settings: REM_* environment variables, or a TOML file (--config FILE or REM_CONFIG) with the
same names in lower case; see README "Configuration".

exit codes:
  0  done (a cycle completed, or was stopped and recorded interrupted)
  1  failed: a cycle failed, bad input lines or notes were rejected, no such node, Chroma
     unreachable, no data dir or graph database (read commands and drain never create one)
  2  usage or configuration error (bad argument, invalid TOML, invalid setting)
  3  busy: another cycle, daemon or drain holds the data dir's lock
  130, 143, 129  import, import-notes, drain, backfill, reindex or candidates --judge stopped by SIGINT (Ctrl-C), SIGTERM or
     SIGHUP; a line on stderr says what was done, and re-running is safe (merge, forget, backup,
     restore … once under way finish and report instead)
  141  the output's reader went away (rem-cycle export | head): stopped without a message, as by SIGPIPE
"""
# The largest count (``--limit``, ``--runs``) a command takes: far past any graph, well within the
# database's integers (a larger one made SQLite raise OverflowError).
MAX_COUNT = 1_000_000_000
# The longest line of ``enqueue``'s input read in whole: a character may be a 6-byte ``\\uXXXX``
# escape there and 1 byte in its queue line (at most MAX_LINE_BYTES), so a longer line can never
# be queued; it is read past in pieces of _SKIP_PIECE_BYTES.
MAX_ENQUEUE_LINE_BYTES = 6 * MAX_LINE_BYTES
_SKIP_PIECE_BYTES = 64 * 1024
# Edges and turns ``show`` prints by default: a node mentioned in thousands of turns stays readable.
SHOW_LIMIT = 20

log = get_logger(__name__)

Handler = Callable[[Settings, argparse.Namespace], Awaitable[int]]


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    # SUPPRESS so a value given before the subcommand is not reset by the subparser's default.
    common.add_argument("--config", metavar="FILE", default=argparse.SUPPRESS, help="TOML settings file")
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print one JSON object")
    return common


class _Parser(argparse.ArgumentParser):
    """argparse's parser, except that writing ``--help``, ``--version`` or a usage error raises
    (argparse swallows the error): a reader that went away (``rem-cycle --help | head -1``) ends
    the command as it ends every other one (:func:`worker.entry.reader_gone`), not as exit 0."""

    def _print_message(self, message: str, file: Any = None) -> None:
        if message:
            (file or sys.stderr).write(message)


class _MainParser(_Parser):
    """The top-level parser: its epilog names the data dir the commands read, which takes loading
    the settings — done only when the help is written, not at every command's start."""

    def format_help(self) -> str:
        self.epilog = EPILOG.format(data_dir=_help_data_dir())
        return super().format_help()


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = _MainParser(
        prog="rem-cycle",
        description="Consolidate agent memories in Chroma into a knowledge graph in SQLite or PostgreSQL.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}", help="print the version and exit")
    parser.add_argument("--once", action="store_true", help="run one REM cycle and exit (non-zero when it failed)")
    parser.add_argument(
        "--allow-mass-retraction", action="store_true",
        help="with --once: retract every session whose rows left Chroma, even most of the graph "
        "(refused without it: mass-retraction-refused)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", title="commands (none: run the daemon)")
    imp = add_command(sub, "import", common, "write sessions from a JSONL file into Chroma")
    imp.add_argument("file", help="JSONL file, one session per line (see README); - reads standard input")
    imp.add_argument(
        "--allow-move", action="store_true",
        help="a turn id that belongs to another session moves to this line's session (each move is reported); "
        "without it the line is rejected",
    )
    status = add_command(sub, "status", common, "recent runs, backlog and graph counts")
    status.add_argument("--runs", type=_non_negative_int, default=10, help="how many recent runs to show (default 10)")
    retry = add_command(sub, "retry", common, "make failed / undigestible sessions eligible again now")
    which = retry.add_mutually_exclusive_group(required=True)
    which.add_argument("--session", metavar="ID", action="append", help="a session id (repeatable)")
    which.add_argument("--all", action="store_true", help="every undigestible session and every failed chunk")
    export = add_command(sub, "export", common, "graph snapshot as JSON or GraphML")
    export.add_argument("--format", choices=("json", "graphml"), default="json", help="output format (default json)")
    export.add_argument("--out", metavar="FILE", help="write to FILE instead of stdout")
    export.add_argument(
        "--include-anchors", action="store_true", help="also export MEMORY/SESSION/NOTE nodes and provenance edges"
    )
    as_of_help = "the graph as known at DATE (2026-11-15, end of day UTC), an ISO 8601 time, epoch seconds or a written date"
    export.add_argument("--as-of", metavar="DATE", help=as_of_help)
    show = add_command(sub, "show", common, "one node: aliases, edges, and the turns it came from")
    show.add_argument("--as-of", metavar="DATE", help=as_of_help)
    show.add_argument("node_id", metavar="NODE_ID", help="e.g. CLASS:LazyEdgeQueue (or an exact name)")
    show.add_argument(
        "--limit", type=_non_negative_int, default=SHOW_LIMIT,
        help=f"at most this many edges (heaviest first), sources and turns, each (default {SHOW_LIMIT}; 0: all)",
    )
    search = add_command(sub, "search", common, "find nodes by name or alias (case and accents folded)")
    search.add_argument("text", metavar="TEXT", help="part of a node's name or alias")
    search.add_argument("--label", help="only nodes with this label, e.g. CLASS")
    search.add_argument("--limit", type=_non_negative_int, default=50, help="at most this many nodes (default 50; 0: all)")
    search.add_argument("--as-of", metavar="DATE", help=as_of_help)
    backup = add_command(sub, "backup", common, "copy the graph database (safe while the daemon runs)")
    backup.add_argument("path", help="destination file (replaced atomically when the copy is sound)")
    restore = add_command(sub, "restore", common, "put a backup in place of the graph database (workers stopped)")
    restore.add_argument("path", metavar="BACKUP", help="a file `rem-cycle backup` wrote (SQLite file, or pg_dump archive on PostgreSQL)")
    unmerge = add_command(sub, "unmerge", common, "undo the merges of a node (restores it, its edges and aliases)")
    unmerge.add_argument("node_id", metavar="NODE_ID", help="the node that was merged away")
    candidates = add_command(
        sub, "candidates", common, "pairs identity resolution found ambiguous and did not merge, to review"
    )
    candidates.add_argument("--limit", type=_non_negative_int, default=50,
                            help="at most this many pairs (with --judge: questions) (default 50; 0: all)")
    candidates.add_argument(
        "--judge", action="store_true",
        help="ask the model judge (REM_EXTRACTOR=openai, REM_LLM_JUDGE=true) about the listed pairs and apply "
        "each answer: a link merges the pair (rem-cycle unmerge takes it back), 'a new node' keeps it apart (apart --undo)",
    )
    candidates.add_argument(
        "--across", action="store_true",
        help="with --judge: also ask about each name beside the graph's longer names of its type, as a cycle with the judge "
        "does across sessions (for a graph digested without the judge)",
    )
    candidates.add_argument(
        "--cross-type", action="store_true",
        help="with --judge: also ask about the pairs of one name under two types (CONCEPT:rachel / PERSON:Rachel), each a question "
        "of its own; a link folds the CONCEPT into the typed node and lasts",
    )
    apart = add_command(sub, "apart", common, "say two nodes are different things: off the review list, never merged by identity resolution")
    apart.add_argument("node_id", metavar="NODE_ID", nargs="?", help="one node of a reported pair (as candidates prints it)")
    apart.add_argument("other_id", metavar="OTHER_ID", nargs="?", help="the other")
    apart_how = apart.add_mutually_exclusive_group()
    apart_how.add_argument("--undo", action="store_true", help="take the answer back: they may be linked or paired again")
    apart_how.add_argument("--list", action="store_true", help="list the pairs kept apart, newest first, and who said so (a person or the judge)")
    apart.add_argument("--limit", type=_non_negative_int, default=50, help="with --list: at most this many pairs (default 50; 0: all)")
    merge = add_command(sub, "merge", common, "fold one node into another by hand (recorded, undoable)")
    merge.add_argument("merged_id", metavar="NODE_ID", help="the node to merge away")
    merge.add_argument("into_id", metavar="INTO_ID", help="the node that keeps its id and takes the edges and aliases")
    forget = add_command(
        sub, "forget", common, "remove a session, turn, notes file or knowledge node from the graph (not brought back)"
    )
    what = forget.add_mutually_exclusive_group(required=True)
    what.add_argument("--session", metavar="ID", help="a session id")
    what.add_argument("--memory", metavar="ID", help="a memory (turn) id, with or without memory:")
    what.add_argument("--note", metavar="PATH", help="an imported notes file: the path it was imported from, or its note:<id>")
    what.add_argument("--node", metavar="ID|NAME", help="a knowledge node: its id as show prints it, or its name or an alias "
                      "(kept out of later extractions; --undo lets it back)")
    forget.add_argument("--dry-run", action="store_true", help="report what would be removed; change nothing")
    forget.add_argument("--undo", action="store_true", help="with --node: stop keeping the node out; the sessions that said "
                        "it are extracted again from their stored results")
    notes = add_command(sub, "import-notes", common, "extract Markdown/text notes files into the graph")
    notes.add_argument("paths", nargs="+", metavar="PATH", help="files, or folders searched for *.md / *.txt")
    enqueue = add_command(sub, "enqueue", common, "queue lazy edges from a JSONL file (REM_LAZY_QUEUE: the file or the table)")
    enqueue.add_argument("file", help="JSONL file, one edge per line (see README); - reads standard input")
    drain = add_command(sub, "drain", common, "link queued lazy edges, back-filling their endpoints")
    drain.add_argument("--dry-run", action="store_true", help="read the queue and report; change nothing")
    backfill = add_command(sub, "backfill", common, "live-sync recent sessions, then drain the lazy-edge queue")
    backfill.add_argument("--days", type=_positive_days, default=30.0, help="window in days (default 30)")
    backfill.add_argument("--dry-run", action="store_true", help="count what would be synced; change nothing")
    backfill.add_argument("--skip-drain", action="store_true", help="do not drain the lazy-edge queue afterwards")
    recall = add_command(sub, "recall", common, "facts, turns and sessions that answer a question, within a token budget")
    recall.add_argument("query", metavar="QUERY", help="what to recall, in words")
    recall.add_argument("--user", help="only this user's sessions count")
    recall.add_argument("--session", help="only this session")
    recall.add_argument("--as-of", dest="as_of", metavar="DATE", help="only what was known by then (2026-03-01, ISO time, epoch)")
    recall.add_argument("--limit", type=_count_from_one_to(MAX_LIMIT), default=10,
                        help=f"at most this many turns (1-{MAX_LIMIT}, default 10)")
    recall.add_argument("--budget-tokens", dest="budget_tokens", type=_count_from_one_to(MAX_BUDGET_TOKENS), default=None,
                        help=f"pack the answer into this many tokens (1-{MAX_BUDGET_TOKENS}, default REM_RECALL_BUDGET_TOKENS)")
    recall.add_argument("--recency", action="store_true", help="also rank newer turns higher")
    add_command(sub, "reindex", common, "fill the recall index with the text of every ingested turn (reads Chroma)")
    mcp = add_command(sub, "mcp", common, "serve recall to agents over MCP (stdio, or --http)")
    mcp.add_argument("--http", action="store_true", help="streamable HTTP on REM_MCP_HOST:REM_MCP_PORT instead of stdio")
    return parser


def _help_data_dir() -> Path:
    """The data dir ``--help`` names: the one every command reads (``REM_DATA_DIR``, else the
    ``data_dir`` of ``REM_CONFIG``'s file, else the default); with settings that do not load (the
    command will say why), ``REM_DATA_DIR`` or the default."""
    try:
        return load_settings().data_dir.resolve()
    except ConfigError:
        return Path(os.path.expanduser(os.environ.get("REM_DATA_DIR") or Settings.model_fields["data_dir"].default)).resolve()


def add_command(
    sub: argparse._SubParsersAction, name: str, common: argparse.ArgumentParser, summary: str
) -> argparse.ArgumentParser:
    """A subcommand whose one-line summary is both its entry in ``--help`` and its own description."""
    return sub.add_parser(name, parents=[common], help=summary, description=f"{summary[0].upper()}{summary[1:]}.")


def _version() -> str:
    try:
        return version("rem-cycle")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def _as_of(value: str) -> str:
    """``--as-of`` in the graph's time form, one reading for every command that takes it (``recall``,
    ``show``, ``search``, ``export``) and for the MCP tools: ISO 8601, epoch seconds or milliseconds,
    written dates (:func:`pipelines.recall.parse_as_of`). Read here, before any settings or graph,
    so every command refuses a moment alike: one line, exit 2 (argparse's type check wrote its usage
    as well). Raises :class:`pipelines.asof.AsOfError` or :class:`pipelines.recall.RecallInputError`
    with the reason."""
    from pipelines.recall import parse_as_of

    return cast(str, parse_as_of(value))


# The arguments that name a file: a file name need not be UTF-8 (a Latin-1 system's caf\xe9.md),
# and Python gives its bytes back to open().
_FILE_ARGUMENTS = frozenset({"config", "out", "file", "path", "paths", "note"})


def _not_utf8(args: argparse.Namespace, parser: argparse.ArgumentParser) -> str | None:
    """Why a text argument of ``args`` (a query, a name, an id, a time: any but a file's) cannot be
    read, when it holds bytes that are not UTF-8 (Python keeps such a command-line byte as a lone
    surrogate); ``None`` otherwise. The argument is named as ``parser``'s usage names it
    (:func:`_usage_names`). No text the graph holds has such bytes: ``search`` failed as the
    database refused the text (exit 1), ``recall`` left the word out and answered another query."""
    names = _usage_names(parser, getattr(args, "command", None))
    for name, given in vars(args).items():
        if name in _FILE_ARGUMENTS:
            continue
        for value in given if isinstance(given, list) else [given]:
            if isinstance(value, str) and (shown := _bytes_not_utf8(value)) is not None:
                named = names.get(name, name.upper())
                return f"{named} {shown} is not UTF-8: give it in UTF-8 (the terminal or script that ran rem-cycle writes another encoding)"
    return None


def _usage_names(parser: argparse.ArgumentParser, command: str | None) -> dict[str, str]:
    """Each argument's destination → its name in ``parser``'s usage (and ``command``'s): an
    option's long form (``--user``, however abbreviated on the command line), a positional's
    metavar (``merge``'s ``NODE_ID``, whose destination is ``merged_id``)."""
    parsers = [parser, *(action.choices[command] for action in parser._actions  # argparse keeps its actions private
                         if isinstance(action, argparse._SubParsersAction) and command in action.choices)]
    return {action.dest: max(action.option_strings, key=len) if action.option_strings else str(action.metavar or action.dest.upper())
            for each in parsers for action in each._actions}


def _bytes_not_utf8(value: str) -> str | None:
    """``value`` written as the bytes it was given as when they are not UTF-8 (Python reads such a
    byte as a lone surrogate, U+DC80-U+DCFF); ``None`` for UTF-8 text."""
    try:
        value.encode("utf-8")
        return None
    except UnicodeEncodeError:
        try:
            return repr(value.encode("utf-8", "surrogateescape"))
        except UnicodeEncodeError:  # another lone surrogate, which no command line gives
            return ascii(value)


def _whole_number(value: str) -> int:
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {value!r}") from None


def _count_from_one_to(most: int) -> Callable[[str], int]:
    """An argument type: a whole number from 1 to ``most``, its refusal saying so."""

    def count(value: str) -> int:
        number = _whole_number(value)
        if not 1 <= number <= most:
            raise argparse.ArgumentTypeError(f"must be 1 to {most}, not {number}")
        return number

    return count


def _non_negative_int(value: str) -> int:
    number = _whole_number(value)
    if number < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    if number > MAX_COUNT:
        raise argparse.ArgumentTypeError(f"must be 0 to {MAX_COUNT}, not {number}")
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
    """A rich progress bar on stderr when it is a terminal (and no ``--json``); else no callback.
    Its description is shown as written, as every console shows text (no markup, no emoji codes:
    the default columns read it as markup, and markup turns `:bug:` into 🐛; la32out)."""
    if getattr(args, "json", False) or not sys.stderr.isatty():
        yield None
        return
    from rich.progress import Progress, TextColumn

    from worker.report import output_console

    columns = (TextColumn("{task.description}", markup=False, style="progress.description"), *Progress.get_default_columns()[1:])
    with Progress(*columns, console=output_console(stderr=True), transient=True) as progress:
        task = progress.add_task(description, total=None)
        yield lambda done, total: progress.update(task, completed=done, total=total or None)


def _emit(args: argparse.Namespace, payload: dict[str, Any], text: Callable[[], None]) -> None:
    if getattr(args, "json", False):
        print(json.dumps(payload, indent=None, sort_keys=True, default=str))
    else:
        text()


async def cmd_once(settings: Settings, args: argparse.Namespace) -> int:
    from worker.signals import stop_on_signals

    def text() -> None:
        from worker.report import print_cycle

        print_cycle(result.as_dict())

    result = None
    cancelled: list[CycleResult] = []
    try:
        async with stop_on_signals(grace_seconds=settings.grace_seconds) as stop:
            result = await run_cycle(
                settings, reason="manual", mode="once", stop=stop.event, allow_mass_retraction=args.allow_mass_retraction,
                on_cancelled=cancelled.append,
            )
            # Printed while the stop signals are still watched: a Ctrl-C just after the cycle
            # finished (and was recorded) must not cost its report and exit 130.
            _emit(args, result.as_dict(), text)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; not starting a second one", file=sys.stderr)
        return EXIT_BUSY
    if result is None:  # cancelled after the grace time; the run is recorded interrupted
        if cancelled and getattr(args, "json", False):
            _emit(args, cancelled[0].as_dict(), text)
        print("rem-cycle: stopped before the cycle finished (recorded as interrupted)", file=sys.stderr)
        return EXIT_OK
    return result.exit_code


def _unreadable_file(path: str) -> str | None:
    """Why ``path`` is no file to read (missing, a directory), or None. Only looked at, never
    opened: opening a named pipe would take the place of the reader its writer waits for."""
    try:
        mode = os.stat(path).st_mode
    except OSError as exc:
        return exc.strerror or str(exc)
    return "Is a directory" if stat.S_ISDIR(mode) else None


async def cmd_import(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from pipelines.importer import ImportStats, import_sessions
    from store.chroma import ChromaStore, ChromaStoreError

    if args.file != "-" and (unreadable := _unreadable_file(args.file)):  # before anything is created: a mistyped path leaves no data dir
        print(f"rem-cycle: cannot read {args.file}: {unreadable}", file=sys.stderr)
        return EXIT_FAILED
    stats = ImportStats()
    progress.describe = lambda: (
        f"lines 1-{stats.done_through_line} are imported or rejected, the rest is not"
        if stats.done_through_line else "no line is fully imported yet"
    ) + f" ({stats.memories_written} memories and {stats.summaries_written} summaries written)"
    source: str | int = args.file
    if args.file == "-":  # standard input, spooled as enqueue's: a signal stops a read that may never end
        with await _readable_source("-") as spool:
            spool.seek(0)
            source = os.dup(spool.fileno())  # read_lines closes it
    chroma = await ChromaStore.connect(settings)
    try:
        await import_sessions(
            source,
            chroma=chroma,
            memory_collection=settings.memory_collection,
            summary_collection=settings.session_collection,
            allow_move=args.allow_move,
            stats=stats,
        )
    except ChromaStoreError as exc:  # gone, or refusing writes (a full disk): say what was done, rejections too
        stats.stopped = str(exc)

    def text() -> None:
        rejected = f"; {len(stats.bad_lines)} lines rejected (nothing of them written)" if stats.bad_lines else ""
        moved = f"; {len(stats.moves)} turns moved between sessions" if stats.moves else ""
        print(
            f"imported {stats.sessions} sessions from {stats.lines} lines: "
            f"{stats.memories_written} memories written ({stats.memories_unchanged} unchanged), "
            f"{stats.summaries_written} summaries written ({stats.summaries_unchanged} unchanged){rejected}{moved}"
        )
        notes = [(bad["line"], bad["error"]) for bad in stats.bad_lines]
        notes += [(m["line"], f"moved turn {m['turn']!r} from session {m['from_session']!r} to {m['to_session']!r}")
                  for m in stats.moves]
        for line, note in sorted(notes, key=lambda item: item[0]):
            print(f"  line {line}: {note}", file=sys.stderr)

    _emit(args, stats.as_dict(), text)
    if stats.stopped:
        done = stats.done_through_line
        what = f"lines 1-{done} are imported or listed as rejected, the rest is not" if done else "no line is fully imported yet"
        print(f"rem-cycle: import stopped: {stats.stopped}; {what}; re-running the import is safe", file=sys.stderr)
    return EXIT_OK if not stats.bad_lines and not stats.stopped else EXIT_FAILED


async def cmd_status(settings: Settings, args: argparse.Namespace) -> int:
    from worker.report import collect_status, print_status

    stores = await open_stores(settings)
    try:
        payload = await anyio.to_thread.run_sync(lambda: collect_status(settings, stores, runs=args.runs))
    finally:
        stores.close()
    _emit(args, payload, lambda: print_status(payload))
    return EXIT_OK


async def cmd_retry(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from store.chunks import ChunkResultStore
    from store.ids import row_id_given
    from worker.report import reset_failures, sessions_never_read

    sessions = None if args.all else [row_id_given(session, "session") for session in args.session]
    with progress.to_the_end():
        stores = await open_stores(settings)
        try:
            unknown = await anyio.to_thread.run_sync(lambda: sessions_never_read(stores, sessions or []))
            # What --all resets: read first, the reset deletes the failed results that say it.
            failing = sessions if sessions is not None else sorted(await anyio.to_thread.run_sync(ChunkResultStore(stores.db).sessions_with_failures))
            payload = {**await anyio.to_thread.run_sync(lambda: reset_failures(stores, sessions)), "unknown": unknown}
        finally:
            stores.close()
        def text() -> None:
            if payload["sessions_reset"] or payload["chunks_reset"]:
                print(f"reset {payload['sessions_reset']} sessions and {payload['chunks_reset']} failed chunks; "
                      f"{_who_tries(failing, sessions_too=sessions is None and payload['sessions_reset'] > 0)}")
            elif not sessions or len(set(unknown)) < len(set(sessions)):  # ids all unknown: said on stderr alone
                print(f"nothing to reset: no session{' named' if sessions else ''} is failing or undigestible "
                      "(rem-cycle status lists them)")

        _emit(args, payload, text)
        # An id no cycle has read (mistyped, or not ingested yet) fails as show's unknown node does.
        for session in payload["unknown"]:
            print(f"rem-cycle: no session {session!r} in the graph's run state: no cycle has read it (check the id: "
                  "rem-cycle status lists failing sessions)", file=sys.stderr)
        return EXIT_FAILED if payload["unknown"] else EXIT_OK


def _who_tries(keys: list[str], *, sessions_too: bool = False) -> str:
    """What tries again what ``retry`` reset (``keys``, and sessions besides when ``sessions_too``):
    a cycle a session, the next ``import-notes`` of it a notes file (its key, ``note-…``), which no
    cycle reads (userwalk6: ``retry --session note-…`` promised the next cycle; audit32: so did
    ``retry --all`` that reset a notes file's chunks)."""
    from store.ids import is_note_key

    notes = sum(is_note_key(key) for key in keys)
    if not notes:
        return "the next cycle tries them again"
    if notes == len(keys) and not sessions_too:
        return "the next import-notes of the file tries them again (no cycle reads notes files)"
    return "the next cycle tries the sessions again, the next import-notes of each notes file its chunks"


def _refused_output(settings: Settings, path: str) -> bool:
    """Whether ``path`` (a file a command is told to write, replacing what is there) is no file to
    replace: empty, a directory, something other than a regular file or a link (a device such as
    ``/dev/null``, a FIFO, a socket: the rename into place would replace it), or among rem-cycle's
    own files; if so, say so in one line."""
    try:
        mode = os.lstat(path).st_mode if path else None
    except OSError:
        mode = None  # nothing there yet (or not reachable: the write says why)
    if not path:
        why = "no output file named (an empty path)"
    elif (mode is not None and stat.S_ISDIR(mode)) or path.endswith(os.sep):
        why = "it is a directory; name a file in it"
    elif mode is not None and not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        why = ("it is not a regular file (a device, a FIFO or a socket); rem-cycle writes a file beside it "
               "and renames it into place, which would replace it: name a file")
    elif settings.keeps_files_at(path):
        path, why = str(Path(path).resolve()), (
            "rem-cycle keeps its own files there (the graph database, the lazy-edge queue, locks, the embedded "
            "Chroma) and one could be replaced; name a file in another folder (a folder of your own inside the data "
            "dir is fine)")
    else:
        return False
    print(f"rem-cycle: refusing to write to {path}: {why}", file=sys.stderr)
    return True


def _cannot_write(target: str, exc: OSError) -> str | None:
    """One line for an ``OSError`` met making ``target``'s folder or writing ``target`` (or the
    file written beside it and renamed onto it), naming the target as given and what to do; None
    when the error is about another file (the caller lets it go on)."""
    if not exc.filename:
        return None
    failed, wanted = Path(os.path.abspath(exc.filename)), Path(os.path.abspath(target))
    reason = exc.strerror or str(exc)
    if failed in wanted.parents:
        why = f"cannot create its folder {failed}: {reason}"
    elif failed.parent == wanted.parent and failed.name.startswith(wanted.name):
        why = f"{reason} in its folder {wanted.parent}"
    else:
        return None
    return f"rem-cycle: cannot write {target}: {why} (name a file in a folder this user may create and write in)"


class _StdoutInPieces:
    """Stdout written a piece at a time. A write larger than its buffer that a pipe's reader leaves
    mid-way (``export --format graphml | head``) returns the short count from CPython's buffered
    writer, which the text layer drops: the export would end with exit 0. The next piece's write
    raises BrokenPipeError instead (see :func:`worker.entry.reader_gone`)."""

    PIECE_CHARS = 2048  # encoded, within the buffer (8 KiB), which retries a short write itself

    def write(self, text: str) -> int:
        for start in range(0, len(text), self.PIECE_CHARS):
            sys.stdout.write(text[start:start + self.PIECE_CHARS])
        return len(text)


async def cmd_export(settings: Settings, args: argparse.Namespace) -> int:
    """``export``: to standard output, a read (a signal stops it, as any read command); with
    ``--out``, a write (:func:`_export_to_file`)."""
    from worker.knowledge import export_graph

    if args.out is not None:
        return await _export_to_file(settings, args)

    def write() -> None:
        sys.stdout.reconfigure(encoding="utf-8", errors="strict")  # the file format's encoding, as with --out
        export_graph(settings, cast(TextIO, _StdoutInPieces()), fmt=args.format, include_anchors=args.include_anchors, as_of=args.as_of)

    await anyio.to_thread.run_sync(write)
    return EXIT_OK


async def _export_file(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    """``export --out OUT``: written beside OUT and renamed onto it, so OUT is the old file or the
    whole new one, never a piece — in :meth:`CommandProgress.to_the_end`, so a signal lets the
    rename happen and the command say so (the write in its thread would complete anyway)."""
    from worker.knowledge import export_graph

    if _refused_output(settings, args.out):
        return EXIT_USAGE

    def write() -> dict[str, int]:
        return replace_file(args.out, lambda out: export_graph(
            settings, out, fmt=args.format, include_anchors=args.include_anchors, as_of=args.as_of))

    progress.describe = lambda: f"{args.out} was not written"
    with progress.to_the_end():
        try:
            counts = await anyio.to_thread.run_sync(write)
        except OSError as exc:
            if (said := _cannot_write(args.out, exc)) is None:
                raise
            print(said, file=sys.stderr)
            return EXIT_FAILED
        _emit(
            args,
            {"out": args.out, "format": args.format, **counts},
            lambda: print(f"wrote {args.out} ({args.format}): {_counts_line(counts)}", file=sys.stderr),
        )
        return EXIT_OK


_export_to_file = interruptible(_export_file, name="export", rerun="running it again is safe")


async def cmd_search(settings: Settings, args: argparse.Namespace) -> int:
    from worker.knowledge import knowledge_types, search_graph
    from worker.views import print_search

    label = args.label and args.label.upper()
    rows = await anyio.to_thread.run_sync(
        lambda: search_graph(settings, args.text, limit=args.limit or None, label=label, as_of=args.as_of)
    )
    # A type no knowledge node has (a typo, or SESSION: search finds knowledge nodes) would read as
    # a word no name holds: the printed answer names the types there are.
    types = await anyio.to_thread.run_sync(lambda: knowledge_types(settings)) if label and not rows and not getattr(args, "json", False) else None
    _emit(args, {"query": args.text, "results": rows}, lambda: print_search(rows, args.text, label=label, types=types))
    return EXIT_OK


async def cmd_show(settings: Settings, args: argparse.Namespace) -> int:
    from store.ids import InvalidIdError
    from worker.knowledge import forgotten_nodes, show_node
    from worker.views import not_known_yet, print_node

    try:
        view = await show_node(settings, args.node_id, limit=args.limit or None, as_of=args.as_of)
    except InvalidIdError as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if view is None:
        # Not an id: an exact (case-insensitive) name or alias of exactly one node is good enough.
        exact, hits = await _named(settings, args.node_id, as_of=args.as_of)
        view = await show_node(settings, exact[0]["id"], limit=args.limit or None, as_of=args.as_of) if len(exact) == 1 else None
        if view is None:
            # Nodes the graph has now but did not know by --as-of are no unknown node: say so, and
            # since when — whether they were asked for by an id or by a name one or several hold.
            now = await _shown_now(settings, args.node_id) if args.as_of and not exact else []
            if now:
                print(f"rem-cycle: {not_known_yet(now, args.node_id, args.as_of, date_option='--as-of')}", file=sys.stderr)
                return EXIT_FAILED
            suggestions = ", ".join(h["id"] for h in (exact or hits)[:10])
            # A node forget --node took out is gone by its id and its names alike: say so, and how to let it back.
            forgotten = [] if suggestions else await anyio.to_thread.run_sync(lambda: forgotten_nodes(settings, args.node_id))
            print(f"rem-cycle: no node {args.node_id!r}" + (f"; did you mean: {suggestions}" if suggestions else "")
                  + _kept_out(forgotten), file=sys.stderr)
            return EXIT_FAILED
    _emit(args, view, lambda: print_node(view))
    return EXIT_OK


def _kept_out(forgotten: list[str]) -> str:
    """What ``show`` adds to ``no node …`` when the name or id is that of nodes ``forget --node``
    took out (``forgotten``, their ids): that they are kept out, and the ``--undo`` that lets one back."""
    if not forgotten:
        return ""
    if len(forgotten) == 1:
        return (f": {forgotten[0]} was forgotten and is kept out (rem-cycle forget --node; let it back: "
                f"rem-cycle forget --node {shlex.quote(forgotten[0])} --undo)")
    return (f": {', '.join(forgotten)} were forgotten and are kept out (rem-cycle forget --node; let one back: "
            "rem-cycle forget --node ID --undo)")


async def _named(settings: Settings, name: str, *, as_of: str | None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The search hits for ``name`` as of ``as_of``, and those of them whose name or an alias is
    ``name`` (case-insensitive)."""
    from worker.knowledge import exactly_named, search_graph

    hits = await anyio.to_thread.run_sync(lambda: search_graph(settings, name, limit=20, as_of=as_of))
    return exactly_named(hits, name), hits


async def _shown_now(settings: Settings, wanted: str) -> list[dict[str, Any]]:
    """The node ``wanted`` (an id), or every node whose name or alias it is (at most ten), as the
    graph has them now."""
    from worker.knowledge import show_node

    now = await show_node(settings, wanted, limit=1)
    if now is not None:
        return [now]
    exact, _ = await _named(settings, wanted, as_of=None)
    return [view for hit in exact[:10] if (view := await show_node(settings, hit["id"], limit=1)) is not None]


T = TypeVar("T")


class _EditRefused(Exception):
    """A graph edit that did not run; its one-line reason is printed, ``status`` is the exit code."""

    def __init__(self, status: int) -> None:
        super().__init__(status)
        self.status = status


async def _edit_graph(settings: Settings, what: str, edit: Callable[[], T], *, refused: tuple[type[Exception], ...]) -> T:
    """``edit`` (a ``merge``, ``unmerge`` or ``forget``) in a thread under the cycle's single-flight
    lock: a cycle's identity resolution keeps its own view of the graph, so it is never changed
    under one. A held lock (exit 3) or an input in ``refused`` (exit 1, or the exception's own
    ``status``) is printed and raised as :class:`_EditRefused`."""
    from worker.cycle import graph_single_flight

    try:
        async with graph_single_flight(settings):
            return await anyio.to_thread.run_sync(edit)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; {what} when it has finished", file=sys.stderr)
        raise _EditRefused(EXIT_BUSY) from exc
    except refused as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        raise _EditRefused(getattr(exc, "status", EXIT_FAILED)) from exc


async def cmd_unmerge(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from pipelines.forget import KeptOut
    from store.ids import InvalidIdError
    from store.merges import MergeError
    from worker.knowledge import unmerge_node

    def text() -> None:
        for item in undone:
            print(
                f"restored {args.node_id} (was merged into {item['into']}, merge #{item['merge_id']}): "
                f"{item['edges_relinked']} edges back, {item['edges_deleted']} merged edges removed, "
                f"{item['edges_culled']} culled (endpoint gone)"
            )

    with progress.to_the_end():
        try:
            undone = await _edit_graph(settings, "unmerge", lambda: unmerge_node(settings, args.node_id), refused=(MergeError, InvalidIdError, KeptOut))
        except _EditRefused as refusal:
            return refusal.status
        _emit(args, {"node": args.node_id, "undone": undone}, text)
        return EXIT_OK


async def cmd_candidates(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from worker.knowledge import identity_candidates
    from worker.views import print_candidates

    if args.judge:
        return await _judge_candidates(settings, args, progress)
    if args.across or args.cross_type:
        print(f"rem-cycle: candidates {'--across' if args.across else '--cross-type'} goes with --judge", file=sys.stderr)
        return EXIT_USAGE
    pairs, total = await anyio.to_thread.run_sync(lambda: identity_candidates(settings, limit=args.limit or None))
    _emit(args, {"candidates": pairs, "total": total}, lambda: print_candidates(pairs, total))
    return EXIT_OK


async def _judge_candidates(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    """``candidates --judge``: the review list settled by the model judge, under the cycle's lock
    (an answer changes the graph), its server checked first as a cycle's ``provider-ready`` does."""
    from pipelines.extract.model import ExtractionFailure
    from pipelines.review import ReviewSweep
    from worker.cycle import graph_single_flight
    from worker.knowledge import judge_checked, model_judge, settle_review_list
    from worker.views import print_review_sweep

    sweep = ReviewSweep()
    progress.describe = lambda: (f"{len(sweep.linked)} pairs linked and {len(sweep.apart)} kept apart as the judge answered "
                                 "(each answer applied when given); the rest were not asked")
    async with model_judge(settings) as judge:
        if judge is None:
            print("rem-cycle: candidates --judge needs the model judge: REM_EXTRACTOR=openai and REM_LLM_JUDGE=true "
                  f"(now REM_EXTRACTOR={settings.extractor}, REM_LLM_JUDGE={str(settings.llm_judge).lower()})", file=sys.stderr)
            return EXIT_USAGE
        try:
            await judge.extractor.ping()
        except ExtractionFailure as exc:
            print(f"rem-cycle: candidates --judge: no judge to ask: {exc}", file=sys.stderr)
            return EXIT_FAILED
        trusted, failed = await judge_checked(settings, judge.extractor)
        if trusted is None:
            print(f"rem-cycle: candidates --judge: the model judge failed its check: {failed}; its answers would settle "
                  f"the list by rote (REM_LLM_MODEL={settings.llm_model}: a stronger model passes it)", file=sys.stderr)
            return EXIT_FAILED
        try:
            async with graph_single_flight(settings):
                await settle_review_list(settings, trusted.audit_identity, limit=args.limit or None, across=args.across,
                                         cross_type=args.cross_type, sweep=sweep)
        except CycleBusyError as exc:
            print(f"rem-cycle: {exc}; candidates --judge when it has finished", file=sys.stderr)
            return EXIT_BUSY
    report = sweep.as_dict()
    _emit(args, report, lambda: print_review_sweep(report))
    return EXIT_OK


async def cmd_apart(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from store.ids import InvalidIdError
    from store.merges import MergeError
    from worker.knowledge import keep_apart, kept_apart, undo_apart
    from worker.views import print_kept_apart

    if args.list:
        if args.node_id is not None:
            print("rem-cycle: apart --list takes no NODE_ID", file=sys.stderr)
            return EXIT_USAGE
        pairs, total = await anyio.to_thread.run_sync(lambda: kept_apart(settings, limit=args.limit or None))
        _emit(args, {"apart": pairs, "total": total}, lambda: print_kept_apart(pairs, total))
        return EXIT_OK
    if args.other_id is None:
        print("rem-cycle: apart needs NODE_ID and OTHER_ID (or --list)", file=sys.stderr)
        return EXIT_USAGE
    with progress.to_the_end():
        edit = undo_apart if args.undo else keep_apart
        try:
            changed = await _edit_graph(settings, "apart", lambda: edit(settings, args.node_id, args.other_id), refused=(MergeError, InvalidIdError))
        except _EditRefused as refusal:
            return refusal.status
        if args.undo:
            said = (f"{args.node_id} and {args.other_id} are no longer kept apart" if changed
                    else f"{args.node_id} and {args.other_id} were not kept apart: nothing to undo")
            _emit(args, {"node": args.node_id, "other": args.other_id, "undone": changed}, lambda: print(said))
            return EXIT_OK
        _emit(
            args,
            {"node": args.node_id, "other": args.other_id, "added": changed},
            lambda: print(f"{args.node_id} and {args.other_id} are kept apart{'' if changed else ' (they already were)'}: "
                          "off the review list, never merged by identity resolution (undo: rem-cycle apart --undo)"),
        )
        return EXIT_OK


async def cmd_merge(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from pipelines.forget import KeptOut
    from store.ids import InvalidIdError
    from store.merges import MergeError
    from worker.knowledge import merge_node

    with progress.to_the_end():
        try:
            merge_id = await _edit_graph(
                settings, "merge", lambda: merge_node(settings, args.merged_id, args.into_id), refused=(MergeError, InvalidIdError, KeptOut)
            )
        except _EditRefused as refusal:
            return refusal.status
        _emit(
            args,
            {"merge_id": merge_id, "merged": args.merged_id, "into": args.into_id},
            lambda: print(f"merged {args.merged_id} into {args.into_id} (merge #{merge_id}; undo: rem-cycle unmerge {shlex.quote(args.merged_id)})"),
        )
        return EXIT_OK


async def cmd_forget(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from store.ids import InvalidIdError
    from worker.knowledge import NoGraphError, forget

    if args.undo or args.node is not None:
        return await _forget_node(settings, args, progress)

    def text() -> None:
        if not (report["points"] or report["nodes_removed"] or report.get("digests")):
            if report.get("already_forgotten"):  # the same forget run again: it finishes what a killed one left
                # The tombstone does not say whether the first forget found anything: an id never
                # in the graph is tombstoned too, and a mistyped one should be checked.
                print(f"{report['kind']} {report['id']} was already forgotten: nothing more to remove (or it was never in "
                      "the graph, which a forget tombstones too: check the id, rem-cycle search)")
                return
            done = "nothing would be removed" if report["dry_run"] else "nothing was removed"
            kept_out = report.get("tombstone") and not report["dry_run"]
            print(f"{report['kind']} {report['id']} is not in the graph: {done}" + (
                f"; tombstoned, so no cycle ingests it from Chroma (check the id if you meant a {report['kind']} of the "
                "graph: rem-cycle search)" if kept_out else "") + (
                f" ({args.note} is read from the working directory: a file imported from elsewhere, or since moved, is "
                "named by the note:<id> that import-notes and show print)" if args.note and args.note != report["id"] else ""))
            return
        verb = "would remove" if report["dry_run"] else "removed"
        print(
            f"{verb} {report['kind']} {report['id']}: {report['points']} provenance points, {report['nodes_removed']} nodes "
            f"({len(report['knowledge_nodes_removed'])} knowledge nodes left without support), {report['edges_removed']} edges"
            + ("; tombstoned" if report.get("tombstone") and not report["dry_run"] else "")
        )

    with progress.to_the_end():
        try:
            report = await _edit_graph(
                settings, "forget",
                lambda: forget(settings, session=args.session, memory=args.memory, note=args.note, dry_run=args.dry_run),
                refused=(InvalidIdError, NoGraphError),
            )
        except _EditRefused as refusal:
            return refusal.status
        _emit(args, report, text)
        _warn_after_forget(settings, report)
        return EXIT_OK


def _warn_after_forget(settings: Settings, report: dict[str, Any]) -> None:
    """Say on stderr what a committed forget left to a later cycle or drain."""
    # What is left stays recorded (queue_withdrawals, rem_counters erase_due): a cycle or a drain finishes it.
    if report.get("erased") is False:
        kept = ("PostgreSQL keeps the deleted rows it may read until a later VACUUM" if settings.database_url is not None
                else f"{settings.graph_path.name}-wal holds it until SQLite next checkpoints")
        why = report.get("erase_error") or f"another process kept reading an older snapshot, so {kept}"
        print(f"rem-cycle: warning: the forget is done, but the database's files may still hold the forgotten text ({why}); "
              "the erase stays due: the first cycle or rem-cycle drain"
              + (f" after {report['erase_retry_at']}" if report.get("erase_retry_at") else "") + " erases it", file=sys.stderr)
    if report.get("held_answers_error"):
        print(f"rem-cycle: warning: the forget is done, but {settings.held_answers_path.name} may still hold answers "
              f"quoting it ({report['held_answers_error']}); the next cycle's extract phase drops them", file=sys.stderr)
    if report.get("queue_error"):
        print(f"rem-cycle: warning: the forget is done, but the lazy-edge queue files may still hold lines its extraction "
              f"queued ({report['queue_error']}); they stay recorded: the next cycle or rem-cycle drain withdraws them", file=sys.stderr)


async def _forget_node(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    """``forget --node ID|NAME [--undo]``: a knowledge node out of the graph and kept out of later
    extractions (:func:`worker.knowledge.forget`), or let back in (:func:`worker.knowledge.unforget_node`).
    Exit 1: no such node or a bad id; 2: several nodes have the name, or it names a session, turn
    or notes file (``--undo`` without ``--node``, or with ``--dry-run``: a usage error)."""
    from store.ids import InvalidIdError
    from worker.knowledge import NodeNotChosen, NoGraphError, forget, unforget_node

    if args.node is None or (args.undo and args.dry_run):
        print("rem-cycle: --undo goes with --node (and without --dry-run)", file=sys.stderr)
        return EXIT_USAGE

    def text() -> None:
        if args.undo:
            print(f"{report['id']} is no longer kept out; the next cycle extracts again the {len(report['sessions_to_extract'])} "
                  "sessions that said it, from their stored results (no model call)"
                  + (f"; notes files that said it come back when imported again: {', '.join(report['notes'])}" if report["notes"] else ""))
            return
        verb = "would remove" if report["dry_run"] else "removed"
        kept = "would be kept out" if report["dry_run"] else "kept out"
        gone = f"{report['nodes_removed']} node, {report['edges_removed']} edges" if report["nodes_removed"] else "nothing (it was gone already)"
        names = len(report["suppressed_keys"])
        print(f"{verb} {report['id']}: {gone}; {kept} of later extractions under {names} name{'' if names == 1 else 's'} "
              f"(undo: rem-cycle forget --node {shlex.quote(report['id'])} --undo); what its turns say stays: forget them to erase the words")

    with progress.to_the_end():
        try:
            report = await _edit_graph(
                settings, "forget",
                (lambda: unforget_node(settings, args.node)) if args.undo else (lambda: forget(settings, node=args.node, dry_run=args.dry_run)),
                refused=(InvalidIdError, NoGraphError),
            )
        except _EditRefused as refusal:
            return refusal.status
        except NodeNotChosen as exc:
            print(f"rem-cycle: {exc}", file=sys.stderr)
            return exc.status
        _emit(args, report, text)
        _warn_after_forget(settings, report)
        return EXIT_OK


async def cmd_import_notes(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from pipelines.notes import NoteResult
    from worker.knowledge import import_notes

    results: list[NoteResult] = []
    # Each file's result is filled as it goes (``imported`` once its commit committed).
    progress.describe = lambda: ", ".join(
        f"{sum(1 for r in results if r.status == status)} {status}" for status in ("imported", "unchanged", "failed")
    ) + " (files done); the others were not imported"
    try:
        report = await import_notes(settings, args.paths, results=results)
    except CycleBusyError as exc:
        print(f"rem-cycle: {exc}; import the notes when it has finished", file=sys.stderr)
        return EXIT_BUSY

    def text() -> None:
        from worker.views import printable  # a file name may hold what a terminal acts on

        for item in report["files"]:
            detail = f"{item['nodes_written']} nodes, {item['edges_written']} edges written" if item["status"] == "imported" else item["error"] or ""
            print(printable(f"{item['status']:9} {item['path']} ({item['note_id']}) {detail}".rstrip()))
        for error in report["errors"]:
            print(printable(f"error     {error}"), file=sys.stderr)
        for gone in report["gone"]:
            print(f"gone      {printable(gone['path'])} ({gone['note_id']}) is no longer there; what it said stays until "
                  f"rem-cycle forget --note {gone['note_id']}")
        if report["errors"] and not report["files"] and not report["gone"]:
            return  # no file was read: the errors are the whole answer (a line of zeros beside them misleads)
        print(f"{report['imported']} imported, {report['unchanged']} unchanged, {report['failed']} failed"
              + (f", {len(report['gone'])} gone" if report["gone"] else ""))

    _emit(args, report, text)
    return EXIT_OK if not report["failed"] and not report["errors"] else EXIT_FAILED


def _counts_line(counts: dict[str, Any]) -> str:
    return ", ".join(f"{v} {k}" for k, v in counts.items())


async def cmd_backup(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from store.backend import backup, database_location

    if _refused_output(settings, args.path):
        return EXIT_USAGE
    with progress.to_the_end():
        try:
            payload = await anyio.to_thread.run_sync(backup, settings, Path(args.path))
        except StoreError as exc:
            advice = (": stop the workers and restore the graph from an earlier backup (rem-cycle restore BACKUP)"
                      if isinstance(exc, DatabaseDamagedError) else "")
            print(f"rem-cycle: backup failed: {exc}{advice}", file=sys.stderr)
            return EXIT_FAILED
        except OSError as exc:
            if (said := _cannot_write(args.path, exc)) is None:
                raise
            print(said, file=sys.stderr)
            return EXIT_FAILED
        _emit(args, payload, lambda: print(f"backed up {database_location(settings)} to {payload['path']} ({payload['bytes']} bytes, integrity ok)"))
        return EXIT_OK


async def cmd_restore(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from store.backend import restore
    from store.db import Database
    from worker.cycle import graph_single_flight, single_flight
    from worker.daemon import daemon_lock_path
    from worker.knowledge import forget_again, forgotten_and_paid_in_place, keep_answers

    if unreadable := _unreadable_file(args.path):
        print(f"rem-cycle: cannot read {args.path}: {unreadable}", file=sys.stderr)
        return EXIT_FAILED
    carried: dict[str, int] = {}
    kept: list[int] = []
    unread: list[str] = []
    # The replaced graph's paid extractions wait here (JSON lines) while its database is replaced.
    # (In the data dir when this user may write there; else the restore's lock says why it cannot.)
    writable = settings.data_dir.is_dir() and os.access(settings.data_dir, os.W_OK | os.X_OK)
    answers = tempfile.TemporaryFile("w+", encoding="utf-8", dir=settings.data_dir if writable else None)

    def carry_from_the_replaced_graph() -> Callable[[Database], None]:
        """What the replaced graph has that the backup must not undo, put into the restored one before
        anything reads it (the live graph is read only once the backup is sound): a forget is final
        — what the replaced graph has a tombstone for is forgotten again, first — and a chunk the
        model was paid to extract is not paid for again (the replaced graph holds no extraction of
        what it forgot)."""
        tombstones, suppressions, why = forgotten_and_paid_in_place(settings, answers)
        unread.extend([why] if why else [])

        def step(db: Database) -> None:
            if tombstones or suppressions:
                carried.update(forget_again(db, tombstones, suppressions))
            kept.append(keep_answers(db, answers))
        return step

    # Both locks: no cycle, command or daemon of this data dir has the database open meanwhile (on
    # PostgreSQL, nor a cycle of another host: the database's single-flight lock too).
    cycle_lock = graph_single_flight(settings) if settings.database_url is not None else single_flight(settings)
    with progress.to_the_end():
        try:
            async with single_flight(settings, lock_path=daemon_lock_path(settings), what="rem-cycle daemon"), cycle_lock:
                payload = await anyio.to_thread.run_sync(partial(restore, settings, Path(args.path), carry=carry_from_the_replaced_graph))
        except CycleBusyError as exc:
            print(f"rem-cycle: {exc}; stop it before restoring", file=sys.stderr)
            return EXIT_BUSY
        except StoreError as exc:
            print(f"rem-cycle: restore from {args.path} failed, nothing was changed: {exc}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            answers.close()
        payload["answers_kept"] = sum(kept)
        return _report_restore(args, payload, carried, unread)


def _report_restore(args: argparse.Namespace, payload: dict[str, Any], carried: dict[str, int], unread: list[str]) -> int:
    """Print what ``restore`` did (and what it could not carry over); its exit status."""
    payload["forgotten_again"] = carried
    if unread:
        payload["forgets_unread"] = unread[0]
        print(f"rem-cycle: warning: the replaced graph database could not be read ({unread[0]}), so what forget took out "
              "after the backup may be back: forget it again", file=sys.stderr)
    again = (f"; forgotten again since the backup: {carried['sessions']} sessions, {carried['memories']} turns, "
             f"{carried['nodes']} knowledge nodes") if any(carried.values()) else ""
    paid = f"; {payload['answers_kept']} chunk extractions paid for since the backup kept" if payload["answers_kept"] else ""
    _emit(args, payload, lambda: print(
        f"restored {payload['path']} from {args.path} ({payload['bytes']} bytes, integrity ok){again}{paid}; the next cycle "
        "ingests what changed in Chroma since the backup"))
    return EXIT_OK


async def _drain_once(
    settings: Settings, stores: Any, args: argparse.Namespace, progress: CommandProgress, *, before: str = ""
) -> dict[str, Any]:
    """Drain once; a stop signal ends it after the current batch. ``before``: what the command did
    earlier, for the message on a signal."""
    from worker.cycle import drain_lazy_edges

    stop = progress.stop
    progress.describe = lambda: before + "the drain was cut short; its input stays queued (a .draining file the next drain reads first)"
    stop.stops_by_itself = True  # the drain checks between batches and re-queues the unread lines
    try:
        with _progress_bar(args, "draining lazy edges") as on_progress:
            stats = await drain_lazy_edges(
                settings, stores, dry_run=args.dry_run, on_progress=on_progress, should_stop=stop.event.is_set
            )
    finally:
        stop.stops_by_itself = False
    progress.describe = lambda: before + (
        f"{stats.succeeded} queued edges linked, {stats.failed} re-queued, {stats.dead_lettered} dead-lettered; "
        "the unread lines are back in the queue untouched"
    )
    return stats.as_dict()


class _RejectedLine(Exception):
    """A line of ``enqueue``'s input that is no edge at all; the message is the problem."""


def _numbered_edges(source: BinaryIO) -> Iterator[tuple[int, Any]]:
    """(line number, edge) for each non-blank line of ``source`` from its start, read a line at a
    time; a line that is no JSON, or longer than :data:`MAX_ENQUEUE_LINE_BYTES` (read past in
    pieces, never held whole), gives a :class:`_RejectedLine` instead of an edge. Lines end as
    ``bytes.splitlines`` ends them (``\\n``, ``\\r\\n``, ``\\r``), so numbers match an editor's
    (up to the reading bound: past it only ``\\n`` ends a line)."""
    source.seek(0)
    number = 0
    while piece := source.readline(MAX_ENQUEUE_LINE_BYTES + 1):
        if len(piece) > MAX_ENQUEUE_LINE_BYTES and not piece.endswith(b"\n"):
            size = len(piece)
            while not piece.endswith(b"\n") and (piece := source.readline(_SKIP_PIECE_BYTES)):
                size += len(piece)
            number += 1
            size -= piece.endswith(b"\n")
            yield number, _RejectedLine(
                f"line-too-long: line of {size} bytes, longer than any queue line can be (at most {MAX_LINE_BYTES} bytes)"
            )
            continue
        for line in piece.splitlines():
            number += 1
            if line.strip():
                try:
                    yield number, json.loads(line)
                except (ValueError, RecursionError) as exc:
                    yield number, _RejectedLine(f"malformed-json: {exc}")


def _enqueue_problems(source: BinaryIO) -> tuple[int, list[str]]:
    """How many edge lines ``source`` holds and what is wrong with each bad one (nothing is kept
    but the problems): ``queue_lines``, the drain's own rule, on a batch at a time."""
    from pipelines.enqueue import InvalidLazyEdgeError
    from pipelines.lazy_edge import queue_lines
    from store.graph import chunked
    from store.lazy_table import APPEND_BATCH_ROWS

    problems: list[tuple[int, str]] = []
    total = 0
    for part in chunked(_numbered_edges(source), APPEND_BATCH_ROWS):
        total += len(part)
        problems += [(number, str(edge)) for number, edge in part if isinstance(edge, _RejectedLine)]
        edges = [(number, edge) for number, edge in part if not isinstance(edge, _RejectedLine)]
        try:
            queue_lines([edge for _, edge in edges])
        except InvalidLazyEdgeError as exc:
            problems.extend((edges[index][0], f"{reason}: {detail}") for index, reason, detail in exc.problems)
    return total, [f"line {number}: {problem}"[:300] for number, problem in sorted(problems)]


def _standard_input() -> BinaryIO:
    """Standard input, opened on a descriptor of its own; an ``OSError`` saying so when the process
    was started with it closed (``<&-``: Python then has no ``sys.stdin``)."""
    if sys.stdin is None:
        raise OSError("cannot read standard input: it is closed")
    return os.fdopen(os.dup(sys.stdin.fileno()), "rb")


async def _readable_source(path: str) -> BinaryIO:
    """The edges file ``path`` (``-``: standard input, from where it stands) open for both passes
    of :func:`cmd_enqueue` (neither holds the file: see
    :func:`pipelines.enqueue.enqueue_checked_lazy_edges`). A regular file is read as it is; standard
    input, a pipe or a FIFO (`enqueue <(producer)`, /dev/stdin) is copied once into a spool — a
    pipe or terminal as it becomes readable, so that a signal stops the read at once (it may never
    end, and a thread blocked in it would hold the process's exit)."""
    given = await anyio.to_thread.run_sync(lambda: open(path, "rb") if path != "-" else _standard_input())
    if path != "-" and given.seekable():
        return cast(BinaryIO, given)
    with given:
        spool = cast(BinaryIO, tempfile.TemporaryFile())
        try:
            if given.seekable():  # standard input redirected from a file
                await anyio.to_thread.run_sync(shutil.copyfileobj, given, spool)
            else:
                while True:
                    await anyio.wait_readable(given.fileno())
                    if not (piece := os.read(given.fileno(), 1 << 16)):
                        break
                    spool.write(piece)
        except BaseException:
            spool.close()
            raise
    return spool


async def cmd_enqueue(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from pipelines.enqueue import enqueue_checked_lazy_edges

    progress.describe = lambda: "nothing was queued"
    # Reading and checking writes nothing: a signal there stops the command, nothing queued. The
    # append is one transaction (table) or one append under the queue's lock (file): once begun it
    # completes, and the command says so.
    source = await _readable_source(args.file)
    with source:
        count, problems = await anyio.to_thread.run_sync(_enqueue_problems, source)
        if problems:
            for problem in problems:
                print(f"  {problem}", file=sys.stderr)
            print(f"rem-cycle: {len(problems)} of {count} lines rejected; nothing was queued", file=sys.stderr)
            # --json: one object on stdout, refused or not (the text is on stderr above)
            _emit(args, {"queued": 0, "queue": settings.lazy_queue, "lines": count, "rejected": problems}, lambda: None)
            return EXIT_FAILED
        with progress.to_the_end():
            count = await anyio.to_thread.run_sync(
                lambda: enqueue_checked_lazy_edges(settings.lazy_queue_target, (edge for _, edge in _numbered_edges(source)))
            )
            where = "the queue table" if settings.lazy_queue == "database" else str(settings.queue_path)
            _emit(args, {"queued": count, "queue": settings.lazy_queue}, lambda: print(f"queued {count} lazy edges in {where}"))
            return EXIT_OK


async def cmd_drain(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from pipelines.drain import ChromaGoneDuringDrainError
    from store.held_file import held_answers_file
    from store.lazy_queue import LazyEdgeQueue, QueueBusyError
    from worker.knowledge import erase_when_due, withdraw_retracted
    from worker.report import print_drain
    from worker.views import printable

    stores = await open_stores(settings, dry_run=args.dry_run)
    try:
        # What a cycle, backfill or forget killed before its withdrawal left recorded is withdrawn
        # first, as the next cycle's ingest would: those lines name what a retraction or forget took
        # out, and the drain would charge each an attempt it can never link. None recorded: one look
        # at an empty table. A dry run changes nothing. No wait for a drain holding the files: this
        # one would not start either (exit 3 at once, as before). An erase such a process left due
        # is run, as a cycle's finalize runs it (none due: one read of three counter rows).
        withdrawn: dict[str, Any] = {}
        if not args.dry_run:
            withdrawn = await anyio.to_thread.run_sync(
                partial(withdraw_retracted, stores.db, queue=LazyEdgeQueue(settings.queue_path),
                        held=held_answers_file(settings), wait_seconds=0))
            withdrawn.update(await anyio.to_thread.run_sync(erase_when_due, stores.db))
        payload = {**await _drain_once(settings, stores, args, progress), **withdrawn}
    except QueueBusyError as exc:  # printable: the holder's line is as the lock file's writer wrote it
        print(f"rem-cycle: {printable(str(exc))}; not starting a second one", file=sys.stderr)
        return EXIT_BUSY
    except ChromaGoneDuringDrainError as exc:  # says itself what was done and what waits
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_FAILED
    except StoreError as exc:  # the database failed, not a line (pipelines.drain): nothing charged
        # A damaged graph is no wait for the next drain: it says what to do, as a cycle does.
        said = damage_message(exc) or f"drain stopped: {exc}; no queued edge was lost, the unsettled ones wait for the next drain"
        print(f"rem-cycle: {said}", file=sys.stderr)
        return EXIT_FAILED
    finally:
        stores.close()
    _emit(args, payload, lambda: print_drain(payload))
    return EXIT_OK


async def cmd_backfill(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from datetime import UTC, datetime

    from pipelines.backfill import sync_recent_sessions
    from store.backend import database_exists
    from store.chroma import ChromaStoreError
    from store.held_file import held_answers_file
    from store.lazy_queue import LazyEdgeQueue, QueueBusyError
    from worker.cycle import SESSIONS_PER_BATCH
    from worker.knowledge import erase_when_due, withdraw_retracted, withdraw_retracted_despite_failure
    from worker.report import print_backfill

    synced = {"done": 0, "total": 0}
    progress.describe = lambda: f"{synced['done']} of {synced['total'] or '?'} sessions synced, drain not started"
    with tempfile.TemporaryDirectory(prefix="rem-cycle-dry-run-") as scratch:
        # A dry run creates nothing: on a data dir without a graph it reads an empty one made
        # outside it (and removed), so it reports what the backfill would do to the graph it
        # creates; an embedded Chroma store that does not exist is read as an empty one in memory.
        dry_without_graph = args.dry_run and not await anyio.to_thread.run_sync(database_exists, settings)
        stores = await open_stores(settings, scratch_graph=Path(scratch) / "graph.sqlite3" if dry_without_graph else None,
                                   dry_run=args.dry_run)
        try:
            synced_all = False  # False in the finally: a signal, Chroma or a failure stopped the sync
            try:
                with _progress_bar(args, "syncing sessions") as bar:

                    def on_progress(done: int, total: int) -> None:
                        synced.update(done=done, total=total)
                        if bar:
                            bar(done, total)

                    try:
                        recent = await sync_recent_sessions(
                            chroma=stores.chroma,
                            unit=stores.unit,
                            memory_collection=settings.memory_collection,
                            summary_collection=settings.session_collection,
                            now=datetime.now(UTC),
                            days=args.days,
                            dry_run=args.dry_run,
                            sessions_per_batch=SESSIONS_PER_BATCH,
                            on_progress=on_progress,
                        )
                    except ChromaStoreError as exc:  # gone mid-way: say how far it got, as a signal would
                        print(f"rem-cycle: backfill stopped: {exc}; {progress.describe()}; re-running the backfill is safe: "
                              "synced sessions are unchanged", file=sys.stderr)
                        return EXIT_FAILED
                synced_all = True
            finally:
                # The turns it took out go as a cycle's retraction takes them, before the drain:
                # their queue lines are withdrawn (with any a killed cycle left recorded) — also when
                # a signal or Chroma stopped it mid-way (shielded): each batch recorded its turns as
                # it committed, and neither a re-run nor a cycle finds them gone again. None recorded:
                # nothing is read; a dry run changes nothing. When the sync was stopped, a failure of
                # the withdrawal must not take the place of what stopped it (as in a cycle's ingest).
                withdrawn: dict[str, Any] = {"queue_lines_withdrawn": 0, "retractions_withdrawn": 0}
                if not args.dry_run:
                    with anyio.CancelScope(shield=True):
                        withdraw = withdraw_retracted if synced_all else withdraw_retracted_despite_failure
                        withdrawn = await anyio.to_thread.run_sync(partial(withdraw, stores.db, queue=LazyEdgeQueue(settings.queue_path),
                                                                           held=held_answers_file(settings)))
                    if not synced_all and withdrawn.get("queue_error"):
                        print("rem-cycle: the queue lines of the turns taken out stay queued until the next cycle withdraws them: "
                              f"{withdrawn['queue_error']}", file=sys.stderr)
            payload: dict[str, Any] = {**recent.as_dict(), "drain": None, **withdrawn}
            # Their text is erased from the database's files, as a forget's is (the retraction made
            # the erase due: store/erasure.py). What the model said of the turns goes when a cycle
            # commits the session's extraction again, which makes the next erase due.
            if not args.dry_run:
                payload.update(await anyio.to_thread.run_sync(partial(erase_when_due, stores.db, at_once=True)))
            if not args.skip_drain:
                try:
                    before = f"{recent.sessions_synced} of {recent.sessions_in_window} sessions synced; "
                    payload["drain"] = await _drain_once(settings, stores, args, progress, before=before)
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
    except (OSError, StoreError) as exc:  # e.g. the HTTP port is taken, the data dir is not writable
        print(f"rem-cycle: cannot start the daemon: {exc}", file=sys.stderr)
        return EXIT_FAILED


async def cmd_recall(settings: Settings, args: argparse.Namespace) -> int:
    from pipelines.recall import RecallInputError, RecallRequest
    from worker.recall import RecallTimeoutError, run_recall
    from worker.views import print_recall

    try:
        request = RecallRequest(
            query=args.query, user=args.user, session=args.session, as_of=args.as_of, limit=args.limit,
            budget_tokens=settings.recall_budget_tokens if args.budget_tokens is None else args.budget_tokens,
            recency=args.recency,
        )
        answer = await run_recall(settings, request)
    except (RecallInputError, RecallTimeoutError) as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    _emit(args, answer, lambda: print_recall(answer))
    return EXIT_OK


async def cmd_reindex(settings: Settings, args: argparse.Namespace, progress: CommandProgress) -> int:
    from worker.recall import ReindexProgress, reindex

    done = ReindexProgress()
    progress.describe = lambda: f"{done.written} of the {done.scanned} turns read so far were written to the recall index"
    counts = await reindex(settings, progress=done)
    _emit(args, counts, lambda: print(f"reindexed {counts['written']} of {counts['scanned']} turns; index: "
                                      f"{counts['recall_turns']} turns, {counts['recall_sessions']} sessions"))
    return EXIT_OK


async def cmd_mcp(settings: Settings, args: argparse.Namespace) -> int:
    from worker.mcp_server import McpConfigError, serve

    try:
        await serve(settings, http=args.http)
    except McpConfigError as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return EXIT_OK


COMMANDS: dict[str, Handler] = {
    "recall": cmd_recall,
    "reindex": interruptible(cmd_reindex, name="reindex", rerun="running it again is safe: it writes only what the index lacks"),
    "mcp": cmd_mcp,
    "import": interruptible(cmd_import, name="import", rerun="re-running the same import is safe: rows already stored are skipped"),
    "status": cmd_status,
    "retry": interruptible(cmd_retry, name="retry", rerun="running it again is safe"),
    "export": cmd_export,
    "show": cmd_show,
    "search": cmd_search,
    "backup": interruptible(cmd_backup, name="backup", rerun="running it again is safe"),
    "restore": interruptible(cmd_restore, name="restore", rerun="running it again is safe"),
    "unmerge": interruptible(cmd_unmerge, name="unmerge", rerun="running it again is safe"),
    "candidates": interruptible(cmd_candidates, name="candidates", rerun="running it again asks only what is still listed"),
    "merge": interruptible(cmd_merge, name="merge", rerun="running it again is safe"),
    "apart": interruptible(cmd_apart, name="apart", rerun="running it again is safe"),
    "forget": interruptible(cmd_forget, name="forget", rerun="running it again is safe"),
    "enqueue": interruptible(cmd_enqueue, name="enqueue", rerun="running it again is safe"),
    "drain": interruptible(cmd_drain, name="drain", rerun="re-running the drain is safe: no queued line is lost"),
    "backfill": interruptible(cmd_backfill, name="backfill", rerun="re-running the backfill is safe: synced sessions are unchanged"),
    "import-notes": interruptible(cmd_import_notes, name="import-notes", rerun="re-running it is safe: imported files are unchanged"),
}


def _missing_data(settings: Settings, *, graph: bool) -> str | None:
    """Why a command that needs an existing data dir (and ``graph`` database) cannot run here,
    with resolved paths; None when it can. A PostgreSQL graph (REM_DATABASE_URL) is not in the data
    dir: it exists once the database has rem-cycle's schema — without this check ``status``,
    ``retry`` and ``reindex`` created the schema in whatever database the URL named. ``enqueue``
    (not ``graph``) into the queue file needs the data dir the file goes in, on either engine
    (with a PostgreSQL graph it created a mistyped one). Raises :class:`StoreError` when that
    server cannot be reached."""
    if not graph and settings.lazy_queue == "file":
        return None if settings.data_dir.is_dir() else _no_data_dir(settings, "so no queue file")
    if settings.database_url is not None:
        from store.backend import database_exists, database_location

        if graph and not database_exists(settings):
            return f"no graph database at {database_location(settings)} (run a REM cycle first: rem-cycle --once)"
        return None
    if not settings.data_dir.is_dir():
        return _no_data_dir(settings, "so no graph database")
    if graph and not settings.graph_path.is_file():
        return f"no graph database at {settings.graph_path.resolve()} (run a REM cycle first: rem-cycle --once)"
    return None


def _no_data_dir(settings: Settings, consequence: str) -> str:
    """The one line that says the data dir is not there, and ``consequence`` (what is missing with it)."""
    if settings.data_dir.exists():  # a file: no command makes a data dir of it
        return (f"the data dir {settings.data_dir.resolve()} is a file, not a folder, {consequence} (set REM_DATA_DIR or "
                "data_dir in --config to a folder)")
    return (f"no data dir at {settings.data_dir.resolve()}, {consequence} (set REM_DATA_DIR or data_dir in --config; "
            "`rem-cycle --once` creates it)")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rem-cycle`` console script."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.allow_mass_retraction and (args.command or not args.once):  # one cycle's word, never a standing one
        parser.error("--allow-mass-retraction goes with --once (and no COMMAND)")
    if (said := _not_utf8(args, parser)) is not None:
        print(f"rem-cycle: {said}", file=sys.stderr)
        return EXIT_USAGE
    if getattr(args, "as_of", None) is not None:
        from pipelines.asof import AsOfError
        from pipelines.recall import RecallInputError

        try:
            args.as_of = _as_of(args.as_of)
        except (AsOfError, RecallInputError) as exc:
            print(f"rem-cycle: {exc}", file=sys.stderr)
            return EXIT_USAGE
    try:
        settings = load_settings(getattr(args, "config", None))
    except ConfigError as exc:
        print(f"rem-cycle: {exc}", file=sys.stderr)
        return EXIT_USAGE
    remember_secrets(secret_values(settings))
    configure_logging(level=settings.log_level, fmt=settings.log_format)
    for warning in [*unknown_environment(os.environ), *idle_settings(settings)]:
        log.warning(warning)
    try:
        missing = _missing_data(settings, graph=args.command in GRAPH_COMMANDS) if args.command in DATA_DIR_COMMANDS else None
    except StoreError as exc:  # the PostgreSQL server cannot be reached
        missing = redact(str(exc))
    if missing:
        print(f"rem-cycle: {missing}", file=sys.stderr)
        return EXIT_FAILED
    if args.command:
        handler = COMMANDS[args.command]
    else:
        handler = cmd_once if args.once else cmd_daemon
    try:
        return anyio.run(handler, settings, args)
    except KeyboardInterrupt:  # SIGINT outside a command's own handling (read commands)
        return interrupted()
    except BrokenPipeError:  # the output's reader went away: the entry point ends it quietly
        raise
    except Exception as exc:  # noqa: BLE001 - a clear one-line error instead of a traceback
        # Environment problems (unreachable Chroma or Chroma refusing a call, missing or unsafe
        # files, a damaged database) are the operator's to fix: say what is wrong in one line.
        # Anything else is a bug: raise.
        if isinstance(exc, (StoreError, OSError)):
            # A damaged graph says what to do about it, as a cycle that meets it does.
            print(f"rem-cycle: {redact(damage_message(exc) or str(exc))}", file=sys.stderr)
            return EXIT_FAILED
        raise
