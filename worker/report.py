"""What ``status`` and ``--once`` show a person: rich tables on a terminal, plain text otherwise."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from config import Settings
from worker.cycle import Stores


def collect_status(settings: Settings, stores: Stores, *, runs: int = 10) -> dict[str, Any]:
    """Everything ``rem-cycle status`` reports, as plain data."""
    return {
        "data_dir": str(settings.data_dir),
        "chroma": stores.chroma.location,
        "runs": stores.runstate.recent_runs(runs),
        "runs_by_outcome": stores.runstate.runs_by_outcome(),
        "digests": stores.runstate.digest_counts(),
        "oldest_undigested_created_at": stores.runstate.oldest_undigested_created_at(),
        "undigestible": [d.session_id for d in stores.runstate.undigestible_sessions()],
        "graph": stores.graph.counts(),
    }


def _console() -> Console:
    return Console(highlight=False, soft_wrap=True)


def print_cycle(result: dict[str, Any]) -> None:
    """One finished cycle: outcome line plus a table of phases."""
    console = _console()
    line = f"REM cycle {result['run_id']}: [bold]{result['outcome']}[/bold] in {result['wall_ms'] / 1000:.2f}s"
    if result.get("reason_code"):
        line += f" (phase {result['failure_phase']}: {result['reason_code']} — {result.get('message')})"
    console.print(line)
    table = Table("phase", "state", "ms", "counts")
    for name, phase in result["phases"].items():
        counts = {k: v for k, v in phase.items() if k not in ("state", "duration_ms", "graph")}
        table.add_row(name, phase["state"], str(phase["duration_ms"]), _flat(counts))
    console.print(table)
    graph = result["phases"].get("finalize", {}).get("graph")
    if graph:
        console.print(f"graph: nodes {_flat(graph['nodes'])} · edges {_flat(graph['edges'])}")


def print_status(status: dict[str, Any]) -> None:
    """The ``status`` report."""
    console = _console()
    console.print(f"data dir {status['data_dir']} · chroma {status['chroma']}")
    table = Table("run", "started", "outcome", "seconds", "failure")
    for run in status["runs"]:
        seconds = _duration(run["started_at"], run.get("finished_at"))
        failure = f"{run['failure_phase']}: {run['reason_code']}" if run.get("reason_code") else ""
        table.add_row(run["run_id"], run["started_at"], run["outcome"], seconds, failure)
    console.print(table)
    console.print(f"sessions: {_flat(status['digests'])}")
    if status.get("oldest_undigested_created_at"):
        console.print(f"oldest undigested session created {status['oldest_undigested_created_at']}")
    if status["undigestible"]:
        console.print(f"undigestible: {', '.join(status['undigestible'])}")
    graph = status["graph"]
    console.print(f"graph: {graph['node_total']} nodes {_flat(graph['nodes'])} · {graph['edge_total']} edges {_flat(graph['edges'])}")


def _flat(mapping: dict[str, Any]) -> str:
    return " ".join(f"{k}={v}" for k, v in mapping.items())


def _duration(start: str, end: str | None) -> str:
    from datetime import datetime

    if not end:
        return "-"
    delta = datetime.fromisoformat(end.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00"))
    return f"{delta.total_seconds():.2f}"
