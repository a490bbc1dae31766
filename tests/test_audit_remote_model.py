"""The model server misbehaving in ways the fault matrix of tests/test_model_faults.py does not
cover, through real REM cycles against the loopback server of tests/llm_server.py: an answer that
trickles in past the request's timeout, one that never ends, JSON nested too deep for Python's
parser. Each fails only the chunk it answers, with a recorded kind, and never the cycle.
"""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import anyio
import pytest

from config import Settings
from tests.llm_server import Behaviour, Flood, LLMServer, Reply, Status, Trickle
from tests.test_model_faults import MARKER, bad_calls, fault_settings, load, semantic_writes
from worker.cycle import open_stores, run_cycle

DEEP = "[" * 100_000 + "]" * 100_000  # valid JSON: Python's parser gives up on it (RecursionError)


FAULTS: list[tuple[str, Behaviour, str, int]] = [
    # (name, behaviour, recorded kind, model calls)
    ("trickle-past-the-timeout", Trickle(interval=0.05), "timeout", 1),
    ("endless-answer", Flood(size=200 * 2**20), "provider-error", 1),
    ("content-nested-too-deep", Reply(DEEP), "schema-failure", 2),
    ("body-nested-too-deep", Status(200, DEEP), "provider-error", 1),
    ("body-nested-too-deep-inside", Status(200, '{"choices": ' + DEEP + "}"), "provider-error", 1),
]


@pytest.mark.parametrize(("name", "behaviour", "kind", "calls"), FAULTS, ids=[f[0] for f in FAULTS])
async def test_a_misbehaving_answer_fails_its_chunk_only(
    settings: Settings, tmp_path: Path, name: str, behaviour: Behaviour, kind: str, calls: int
) -> None:
    with LLMServer() as server:
        server.script(*[behaviour] * 4, match=MARKER)
        mine = fault_settings(settings.data_dir, server, llm_timeout_seconds=1.0)
        stores = await open_stores(mine)
        try:
            await load(mine, stores, tmp_path)
            started = time.monotonic()
            tracemalloc.start()
            try:
                with anyio.fail_after(60):
                    result = await run_cycle(mine, stores=stores)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
            assert result.outcome == "completed", result.message
            extract = result.phases["extract"]
            assert (extract["sessions_digested"], extract["sessions_failed"]) == (1, 1), extract
            assert extract["failures_by_kind"] == {kind: 1}
            (failing,) = stores.runstate.failing_chunks()
            assert (failing["session_id"], failing["error_kind"]) == ("bad", kind) and failing["error"]
            assert semantic_writes(stores, "bad") == [] and semantic_writes(stores, "good") != []
            assert bad_calls(server) == calls
            # bounded: the request's timeout is the whole answer's, and an answer's size is capped
            assert time.monotonic() - started < 20
            assert peak < 100 * 2**20, f"{peak / 2**20:.0f} MiB"
        finally:
            stores.close()
