"""One queued line whose Chroma back-fill read never answers, while Chroma answers everything else:
the line is charged an attempt (and dead-lettered after its last), and the rest of the queue drains.
Before, a read that timed out counted as "Chroma unreachable" — no attempt, the drain stopped at that
batch — so the one line held every drain at its batch for good. A real `chroma run` behind a loopback
proxy that withholds the answer to any read naming the one row (drainstall audit)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from config import Settings
from pipelines.drain import ChromaGoneDuringDrainError
from pipelines.enqueue import enqueue_lazy_edges
from pipelines.importer import import_sessions
from store.backend import open_database
from store.chroma import ChromaStore
from tests.conftest import free_port, make_session, write_sessions
from tests.http_proxy import forwarding_proxy
from tests.test_change_scan import _query
from tests.test_roundtrip_drain import _drain

BAD_ROW = "rt-a-t0002"
EDGES = [
    {"source": "memory:rt-a-t0000", "target": "session:rt-b", "relationship": "RELATES_TO"},
    {"source": f"memory:{BAD_ROW}", "target": "memory:rt-b-t0000", "relationship": "STALLS"},
    {"source": "memory:rt-b-t0001", "target": "memory:rt-a-t0001", "relationship": "FOLLOWS"},
]


@pytest.fixture
def withholding_proxy(chroma_server: str) -> Iterator[str]:
    """A loopback HTTP proxy to ``chroma_server`` that never answers a request whose body names
    ``BAD_ROW`` (the one row whose read always times out); yields its URL."""
    released = threading.Event()

    def unless_the_bad_row(body: bytes) -> bool:
        if BAD_ROW.encode() in body:
            released.wait(60)  # the read that never answers (until the test ends)
            return False
        return True

    with forwarding_proxy(chroma_server, unless_the_bad_row) as url:
        try:
            yield url
        finally:
            released.set()


def _linked(settings: Settings) -> list[tuple[str, str, str]]:
    return [tuple(row) for row in _query(
        settings, "SELECT source, target, relationship FROM edges WHERE relationship IN ('RELATES_TO', 'FOLLOWS', 'STALLS') "
        "ORDER BY relationship")]


def _dead(settings: Settings) -> list[str]:
    if settings.lazy_queue == "file":
        dead = Path(settings.queue_path).with_name("lazy-edges.dead.jsonl")
        return dead.read_text().splitlines() if dead.exists() else []
    return [row[0] for row in _query(settings, "SELECT reason FROM lazy_edges_dead")]


@pytest.mark.parametrize("form", ["file", "database"])
async def test_a_line_whose_chroma_read_never_answers_is_charged_and_the_rest_drains(
    settings: Settings, chroma_server: str, withholding_proxy: str, tmp_path: Path, form: str
) -> None:
    name = uuid.uuid4().hex[:12]
    live = settings.model_copy(update={
        "chroma_url": chroma_server, "memory_collection": f"m-{name}", "session_collection": f"s-{name}",
        "lazy_queue": form, "lazy_max_attempts": 2,
    })
    source = write_sessions(tmp_path / "in.jsonl", [make_session("rt-a", 3), make_session("rt-b", 2)])
    stats = await import_sessions(source, chroma=ChromaStore(live), memory_collection=live.memory_collection,
                                  summary_collection=live.session_collection)
    assert not stats.bad_lines
    open_database(live).close()
    enqueue_lazy_edges(live.lazy_queue_target, EDGES)
    proxied = live.model_copy(update={"chroma_url": withholding_proxy, "chroma_timeout_seconds": 1.0})

    # Before: ChromaGoneDuringDrainError ("no attempt counted"), nothing linked, at every drain.
    first = await _drain(proxied)
    assert (first.succeeded, first.failed, first.requeued, first.dead_lettered) == (2, 1, 1, 0)
    assert first.failure_reasons == {"chroma-fetch-failed": 1}
    assert _linked(live) == [
        ("memory:rt-b-t0001", "memory:rt-a-t0001", "FOLLOWS"), ("memory:rt-a-t0000", "session:rt-b", "RELATES_TO"),
    ]

    last = await _drain(proxied)  # its last attempt (REM_LAZY_MAX_ATTEMPTS=2): dead-lettered
    assert (last.succeeded, last.failed, last.dead_lettered) == (0, 1, 1)
    [dead] = _dead(live)
    assert "max-attempts" in dead
    assert (await _drain(proxied)).total_lines == 0


async def test_chroma_down_still_holds_every_line_uncharged(settings: Settings, tmp_path: Path) -> None:
    """The outage rule stands: Chroma that does not answer its heartbeat either is down, and the
    drain stops charging nothing (tests/test_roundtrip_drain.py has the full outage journey)."""
    down = settings.model_copy(update={"chroma_url": f"http://127.0.0.1:{free_port()}", "chroma_timeout_seconds": 1.0})
    open_database(down).close()
    enqueue_lazy_edges(down.lazy_queue_target, EDGES)
    before = Path(down.queue_path).read_bytes()
    with pytest.raises(ChromaGoneDuringDrainError, match="no attempt counted"):
        await _drain(down)
    assert Path(down.queue_path).read_bytes() == before
