"""What ``status`` and ``--once`` show a person: rich tables on a terminal, plain text otherwise."""

from __future__ import annotations

import errno
import os
from datetime import UTC, datetime
from typing import Any

from rich.console import Console
from rich.table import Table

from config import Settings
from store.chunks import ChunkResultStore
from store.claims import lease_holders, owner_state, withdrawal_waits
from store.erasure import EraseDueStore
from store.lazy_queue import LazyEdgeQueue
from store.lazy_table import LazyEdgeTable
from store.merges import MergeStore
from worker.cycle import Stores
from worker.metrics import parse_utc, read_queue, silent_seconds


def collect_status(settings: Settings, stores: Stores, *, runs: int = 10) -> dict[str, Any]:
    """Everything ``rem-cycle status`` reports, as plain data (a dict other reports extend)."""
    recent = stores.runstate.recent_runs(runs)
    now = datetime.now(UTC)
    for run in recent:
        if run["outcome"] == "running":
            run["silent_seconds"] = silent_seconds(run, now)
            # Its process, on this host, is gone (killed): the next cycle records it abandoned.
            # An owner another host, or an earlier release, wrote may be unknown (owner_state).
            run["process_state"] = owner_state(run.get("lease_owner") or "")
            run["process_gone"] = run["process_state"] == "dead"
    digests = stores.runstate.digest_counts()
    queue = read_queue(settings.queue_path)
    table = LazyEdgeTable(stores.db)
    return {
        "data_dir": str(settings.data_dir.resolve()),  # where it is, whatever the current directory
        "chroma": stores.chroma.location,
        "runs": [{**run, "duration_seconds": _duration(run["started_at"], run.get("finished_at"))} for run in recent],
        "runs_by_outcome": stores.runstate.runs_by_outcome(),
        # Running but silent past the lease timeout: wedged, or killed (the next cycle abandons it).
        "stalled_runs": [
            run["run_id"]
            for run in stores.runstate.silent_runs(older_than_seconds=settings.lease_timeout_seconds, now=now)
        ],
        # Running, but their process (on this host) is gone: dead, whatever their heartbeat says.
        "dead_runs": [run["run_id"] for run in recent if run.get("process_gone")],
        "digests": digests,
        "backlog": {
            "undigested_sessions": digests.get("undigested", 0),
            # Sessions changed in Chroma but not yet ingested, as the latest ingest left them.
            "not_ingested_sessions": next(
                (run["phases"]["ingest"].get("backlog") for run in recent if "backlog" in run["phases"].get("ingest", {})),
                None,
            ),
        },
        "oldest_undigested_created_at": stores.runstate.oldest_undigested_created_at(),
        "undigestible": [d.session_id for d in stores.runstate.undigestible_sessions()],
        "undigestible_sessions": [
            {"session_id": d.session_id, "attempts": d.attempts, "reason": d.defer_reason}
            for d in stores.runstate.undigestible_sessions()
        ],
        "failing_chunks": stores.runstate.failing_chunks(),
        "queue": {
            "depth": queue.depth,
            "oldest_timestamp": queue.oldest_timestamp,
            "dead_letters": LazyEdgeQueue(settings.queue_path).dead_letter_count(),
            # The database form (producers anywhere): rows waiting, and its dead letters.
            "table_rows": table.depth(),
            "table_oldest_enqueued_at": table.oldest_enqueued_at(),
            "table_dead_letters": table.dead_letter_count(),
        },
        "graph": stores.graph.counts(),
        # Nodes, as a run record's ``identity_candidates`` counts them; each has up to a few pairs.
        "identity_candidates": MergeStore(stores.db).candidate_node_count(),
        "identity_candidate_pairs": MergeStore(stores.db).candidate_count(),
        # Several workers (REM_SHARED_EXTRACT): the single-flight lock's holder, each worker's claims.
        "leases": lease_holders(stores.db),
        # Deleted text due to be erased from the database's files, and erases that did not complete.
        "erase": EraseDueStore(stores.db).state().as_dict(),
        # Sessions not extracted until the queue lines of what was taken out or rewritten of them
        # are withdrawn (a drain holding the queue files: the cycle warns queue_error each time).
        "withdrawal_waits": withdrawal_waits(stores.db),
    }


def reset_failures(stores: Stores, session_ids: list[str] | None) -> dict[str, int]:
    """``retry``: forget failed chunk attempts and make undigestible sessions eligible again (all of
    them when ``session_ids`` is None)."""
    with stores.db.transaction():
        chunks = ChunkResultStore(stores.db).reset_failures(session_ids)
        sessions = stores.runstate.reset_sessions(session_ids)
    return {"sessions_reset": sessions, "chunks_reset": chunks}


def sessions_never_read(stores: Stores, session_ids: list[str]) -> list[str]:
    """Those of ``session_ids`` (in order) that no cycle or ``import-notes`` has read — no digest
    record, no chunk result: a mistyped id, or one not ingested yet, which ``retry`` cannot reset.
    Ask before :func:`reset_failures`, which deletes the failed results a notes file's key has."""
    known = set(stores.runstate.get_digests(session_ids)) | ChunkResultStore(stores.db).sessions_with_results(session_ids)
    return [s for s in dict.fromkeys(session_ids) if s not in known]


class _OutputConsole(Console):
    """A console whose broken pipe (its reader went away: ``rem-cycle status | head -1``) ends the
    command as every other output does (:func:`worker.entry.main`), not with rich's own exit 1."""

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))


def output_console(*, stderr: bool = False) -> Console:
    """The console every command's report prints to (stdout; ``stderr``: its progress bar, see
    ``worker.cli``). No emoji codes: what it prints holds turn texts, names and ids (`:bug:`,
    `session:two: …`), shown as written (audit31; the progress bar's too, la32out)."""
    return _OutputConsole(stderr=stderr, highlight=False, soft_wrap=True, emoji=False)


def print_cycle(result: dict[str, Any]) -> None:
    """One finished cycle: outcome line plus a table of phases."""
    console = output_console()
    line = f"REM cycle {result['run_id']}: [bold]{result['outcome']}[/bold] in {result['wall_ms'] / 1000:.2f}s"
    if result.get("reason_code"):
        line += f" (phase {result['failure_phase']}: {result['reason_code']} — {result.get('message')})"
    console.print(line)
    table = Table("phase", "state", "ms", "counts")
    for name, phase in result["phases"].items():
        # Zeros, empty lists and false flags are noise on a terminal (``--json`` keeps them all).
        counts = {k: v for k, v in phase.items() if k not in ("state", "duration_ms", "graph") and v not in (0, False, None, [], {})}
        if name == result.get("failure_phase"):
            counts.pop("error", None)  # the line above says it
        table.add_row(name, phase["state"], str(phase.get("duration_ms", "")), _flat(counts))  # a crash has no duration
    console.print(table)
    graph = result["phases"].get("finalize", {}).get("graph")
    if graph:
        console.print(f"graph: nodes {_flat(graph['nodes'])} · edges {_flat(graph['edges'])}")


def print_status(status: dict[str, Any]) -> None:
    """The ``status`` report."""
    console = output_console()
    console.print(f"data dir {status['data_dir']} · chroma {status['chroma']}")
    if status["runs"]:  # none asked for (``--runs 0``) or none yet: no table, an empty one is only a header
        console.print(_runs_table(status))
    newest = status["runs"][0] if status["runs"] else None
    if newest and newest["outcome"] == "failed" and newest.get("failure_phase"):
        # What went wrong and, for a refusal, what to do next: the operator reads it here.
        error = newest["phases"].get(newest["failure_phase"], {}).get("error")
        if error:
            console.print(f"last run failed in {newest['failure_phase']} ({newest['reason_code']}): {error}")
    backlog = status["backlog"]
    pending = backlog["not_ingested_sessions"]
    console.print(
        f"backlog: {backlog['undigested_sessions']} undigested sessions"
        + (f", {pending} changed sessions not yet ingested" if pending else "")
        + f" · sessions {_flat(status['digests'])}"
    )
    if status.get("oldest_undigested_created_at"):
        console.print(f"oldest undigested session created {status['oldest_undigested_created_at']}")
    for session in status.get("undigestible_sessions", []):
        console.print(f"undigestible: {session['session_id']} after {session['attempts']} attempts — {session['reason']}")
    if status["erase"]["erase_failures"]:
        console.print(f"erase: text asked to be forgotten may still be in the database's files; {status['erase']['erase_failures']} "
                      f"erases in a row did not complete (another process kept reading an older snapshot?), "
                      f"the next at the first cycle after {status['erase']['erase_retry_at']}")
    waits = status["withdrawal_waits"]
    if waits["sessions"]:
        more = f" and {waits['sessions'] - len(waits['first'])} more" if waits["sessions"] > len(waits["first"]) else ""
        console.print(f"waiting: {waits['sessions']} sessions are not extracted until the queue lines of what was taken out or "
                      f"rewritten of them are withdrawn ({', '.join(waits['first'])}{more}); a drain holding the queue files "
                      f"keeps them waiting (the cycle's ingest says queue_error)")
    if status["failing_chunks"]:
        chunks = Table("chunk", "error", "attempts", "next attempt", "message", title="failing chunks")
        for chunk in status["failing_chunks"]:
            chunks.add_row(
                chunk["chunk_id"], chunk.get("error_kind") or "", str(chunk["attempts"]),
                chunk.get("next_attempt_at") or "", (chunk.get("error") or "")[:80],
            )
        console.print(chunks)
    for lock in status["leases"]["locks"]:
        if lock["taken_at_once"]:
            console.print(f"lock {lock['name']}: free to take (its holder {lock['owner']}, since {lock['acquired_at']}: process gone)")
        elif lock["owner_gone"]:
            console.print(f"lock {lock['name']}: its holder {lock['owner']} (named by an earlier release), since {lock['acquired_at']}: "
                          f"process gone; taken over when its lease runs out at {lock['lease_expires_at']}")
        else:
            console.print(f"lock {lock['name']}: held by {lock['owner']} since {lock['acquired_at']}, lease until {lock['lease_expires_at']}"
                          + _unknown(lock))
    for claim in status["leases"]["claims"]:
        if claim["taken_at_once"]:
            console.print(f"claims: {claim['sessions']} sessions free to take (their owner {claim['owner']}: process gone)")
        elif claim["owner_gone"]:
            console.print(f"claims: {claim['sessions']} sessions of {claim['owner']} (named by an earlier release): process gone; "
                          f"taken over when their lease runs out at {claim['lease_expires_at']}")
        else:
            console.print(f"claims: {claim['owner']} digests {claim['sessions']} sessions, lease until {claim['lease_expires_at']}"
                          + _unknown(claim))
    for held in status["leases"]["texts"]:
        state = "process gone" if held["owner_gone"] else f"lease until {held['lease_expires_at']}" + _unknown(held)
        console.print(f"text claims: {held['owner']} asks the model about {held['texts']} chunks' words ({state})")
    queue = status["queue"]
    console.print(
        f"lazy-edge queue: {queue['depth']} lines"
        + (f", oldest {queue['oldest_timestamp']}" if queue["oldest_timestamp"] else "")
        + f" · {queue['dead_letters']} dead letters"
        + (f" · table: {queue['table_rows']} rows" if queue["table_rows"] or queue["table_dead_letters"] else "")
        + (f", oldest {queue['table_oldest_enqueued_at']}" if queue["table_oldest_enqueued_at"] else "")
        + (f", {queue['table_dead_letters']} dead" if queue["table_dead_letters"] else "")
    )
    if status["identity_candidates"]:
        console.print(
            f"identity candidates to review: {status['identity_candidates']} nodes in "
            f"{status['identity_candidate_pairs']} pairs (rem-cycle candidates lists the pairs; "
            "a run's identity_candidates counts the nodes it found ambiguous)"
        )
    graph = status["graph"]
    console.print(f"graph: {graph['node_total']} nodes {_flat(graph['nodes'])} · {graph['edge_total']} edges {_flat(graph['edges'])}")


def _runs_table(status: dict[str, Any]) -> Table:
    """The ``status`` report's recent runs, newest first."""
    table = Table("run", "mode", "started", "outcome", "seconds", "failure", title="recent runs")
    for run in status["runs"]:
        seconds = "-" if run["duration_seconds"] is None else f"{run['duration_seconds']:.2f}"
        failure = f"{run['failure_phase']}: {run['reason_code']}" if run.get("reason_code") else ""
        outcome = _styled_outcome(run["outcome"])
        if run.get("process_gone"):
            outcome += " [red](dead: its process is gone; the next cycle records it abandoned)[/red]"
        elif run["run_id"] in status["stalled_runs"]:
            outcome += f" [red](stalled: no heartbeat for {run['silent_seconds']:.0f}s)[/red]"
        table.add_row(run["run_id"], run["mode"], run["started_at"], outcome, seconds, failure)
    return table


def print_drain(stats: dict[str, Any]) -> None:
    """One drain's counts."""
    prefix = "dry run: " if stats.get("dry_run") else ""
    output_console().print(
        f"{prefix}lazy-edge drain: {stats['total_lines']} lines · {stats['succeeded']} linked · "
        f"{stats['failed']} failed ({stats['requeued']} re-queued) · {stats['skipped_malformed']} malformed · "
        f"{stats['dead_lettered']} dead-lettered · {stats['backfilled']} nodes back-filled"
        + (f" · {stats['table_rows']} of the lines from the queue table" if stats.get("table_rows") else "")
        + (" · orphaned .draining recovered" if stats.get("orphan_recovered") else "")
        + (f" · {stats['queue_lines_withdrawn']} lines of forgotten or retracted sessions and turns withdrawn first"
           if stats.get("queue_lines_withdrawn") else "")
        + (" · deleted text erased from the database's files" if stats.get("erased") else "")
    )
    # What stays is recorded (rem_counters erase_due): the next cycle or drain does it.
    if stats.get("erased") is False:
        output_console().print(f"  deleted text may stay in the database's files until a cycle or drain erases it {_erase_held_back(stats)}")
    if stats.get("failure_reasons"):
        output_console().print(f"  failures: {_flat(stats['failure_reasons'])}")


def print_backfill(result: dict[str, Any]) -> None:
    """``rem-cycle backfill``: sessions synced, then the drain."""
    prefix = "dry run: " if result["dry_run"] else ""
    output_console().print(
        f"{prefix}{result['sessions_in_window']} sessions created since {result['since']} "
        f"({result['sessions_present']} already in the graph, {result['sessions_undated']} undated left out"
        f"{', ' + str(result['sessions_forgotten']) + ' forgotten left out' if result.get('sessions_forgotten') else ''}); "
        f"synced {result['sessions_synced']}, failed {result['sessions_failed']} · {_flat(result['ingest'])}"
    )
    if result.get("bad_values"):
        output_console().print(f"bad values in source rows (read as missing or row skipped): {_flat(result['bad_values'])}")
    if result.get("turns_retracted"):
        output_console().print(f"turns whose rows left Chroma taken out: {result['turns_retracted']} "
                               f"(their queue lines withdrawn: {result.get('queue_lines_withdrawn', 0)})")
    # What stays is recorded (queue_withdrawals, rem_counters erase_due): the next cycle does it.
    if result.get("queue_error"):
        output_console().print(f"their lines stay in the queue files until the next cycle withdraws them: {result['queue_error']}")
    if result.get("erased") is False:
        output_console().print(f"their text may stay in the database's files until a cycle erases it {_erase_held_back(result)}")
    for failure in result.get("session_failures", []):
        output_console().print(f"session failed: {failure}")
    drain = result.get("drain")
    if drain and "total_lines" in drain:
        print_drain(drain)
    elif drain:
        output_console().print("drain skipped: another drain is running")


def _erase_held_back(result: dict[str, Any]) -> str:
    """When an erase that did not complete (:func:`worker.knowledge.erase_when_due`'s report) is
    tried again, and why it did not."""
    return (f"(tried again at {result.get('erase_retry_at')}, {result.get('erase_failures')} attempts failed): "
            f"{result.get('erase_error') or 'another process kept reading an older snapshot'}")


def _flat(mapping: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in mapping.items())


def _styled_outcome(outcome: str) -> str:
    colour = {"completed": "green", "failed": "red", "interrupted": "yellow", "abandoned": "magenta"}.get(outcome)
    return f"[{colour}]{outcome}[/{colour}]" if colour else outcome


def _unknown(holder: dict[str, Any]) -> str:
    """What ``status`` adds of a holder whose process this host cannot see (store.claims.owner_state)."""
    return " (its process cannot be seen from this host: alive or not, it keeps its lease)" if holder["owner_state"] == "unknown" else ""


def _duration(start: str, end: str | None) -> float | None:
    begun, ended = parse_utc(start), parse_utc(end)
    return round((ended - begun).total_seconds(), 3) if begun and ended else None
