"""Migration 14: each community label the model (``REM_LLM_JUDGE``) gives is kept as it is given, by
the member set it was asked about (``community_names``), so a worker killed while naming never pays
again for a label already given. The kill is a real SIGKILL of ``python -m worker --once`` while
its fourth of six labels is with the model (tests/llm_server.py, counting requests); the restarted
worker asks only for the labels not answered. Real SQLite files and a real PostgreSQL server."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest

from config import Settings
from store.backend import open_database
from store.communities import CommunityRecord, CommunityStore
from store.graph import Edge, GraphStore, Node
from tests.conftest import ForkedCommand
from tests.daemon_support import start_worker, worker_env
from tests.llm_server import LLMServer, Reply, held
from tests.migrations_support import COMMUNITY_NAMES_VERSION, rolled_back

CLUSTERS = 6


def label_reply(body: dict[str, Any]) -> dict[str, str]:
    """The model's label for a community: ``About`` its first (most connected) member."""
    members = json.loads(body["messages"][-1]["content"])["members"]
    return {"label": f"About {members[0]}"}


def six_clusters(settings: Settings) -> None:
    """Six separate clusters of three concepts each, every pair linked: six communities to name."""
    db = open_database(settings)
    try:
        graph = GraphStore(db)
        nodes = [Node(f"CONCEPT:topic{c} part{m}", "CONCEPT", f"topic{c} part{m}") for c in range(CLUSTERS) for m in range(3)]
        graph.upsert_nodes(nodes)
        graph.link_nodes([Edge(a.id, b.id, "RELATES_TO", 2.0 + m) for c in range(CLUSTERS)
                          for m, (a, b) in enumerate([(nodes[3 * c], nodes[3 * c + 1]), (nodes[3 * c], nodes[3 * c + 2]),
                                                      (nodes[3 * c + 1], nodes[3 * c + 2])])])
    finally:
        db.close()


def worker_once(settings: Settings, server: LLMServer, database_url: str | None) -> subprocess.Popen[bytes] | ForkedCommand:
    """``python -m worker --once`` as a real process (forked by the command server), naming
    communities with the model; its output goes to ``once.log`` beside the data dir."""
    env = worker_env(settings.data_dir, extractor="openai", llm_base_url=server.url, llm_judge="true", llm_max_retries="0",
                     log_level="error")
    if database_url is not None:
        env["REM_DATABASE_URL"] = database_url
    return start_worker("--once", env=env, log_path=once_log(settings))


def once_log(settings: Settings) -> Path:
    """Where :func:`worker_once` writes its runs' output."""
    return settings.data_dir.parent / "once.log"


def killed_while_asked(settings: Settings, server: LLMServer, database_url: str | None, asked: Callable[[], int], *,
                       count: int) -> None:
    """Run :func:`worker_once` and SIGKILL it once the model has been asked ``count`` questions
    (``asked()`` counts them); the test's script holds the last one, so the kill lands while it is
    with the model."""
    killed = worker_once(settings, server, database_url)
    deadline = time.monotonic() + 60
    while asked() < count and killed.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    assert killed.poll() is None, f"the cycle ended before the kill: {once_log(settings).read_text()[-3000:]}"
    killed.send_signal(signal.SIGKILL)
    assert killed.wait(30) == -signal.SIGKILL


def asked(server: LLMServer) -> list[str]:
    """The member lists the model was asked to name, in order (a request the kill cut off before
    its body was sent has none)."""
    return [r.prompt for r in server.chat_requests if r.prompt]


@pytest.mark.both_backends
def test_labels_given_before_a_kill_are_not_asked_for_again(settings: Settings, database_url: str | None) -> None:
    six_clusters(settings)
    with LLMServer(default=Reply(label_reply)) as server:
        # Three labels answered, the fourth held: the kill lands while it is with the model, however
        # long the test takes to see it asked (a delay could run out first on a loaded machine).
        server.script(Reply(label_reply), Reply(label_reply), Reply(label_reply), held(Reply(label_reply)))
        killed_while_asked(settings, server, database_url, lambda: server.chat_count, count=4)
        before = asked(server)
        assert len(before) == 4  # three answered, the fourth in flight at the kill
        db = open_database(settings)
        try:
            assert CommunityStore(db).count() == 0  # nothing stored yet: the kill came before the end of finalize
        finally:
            db.close()

        again = worker_once(settings, server, database_url)
        assert again.wait(120) == 0, once_log(settings).read_text()[-3000:]
        after = asked(server)[len(before):]

    # Only what was not answered before the kill is asked: the one in flight and the two never asked.
    assert len(after) == CLUSTERS - 3 and not set(after) & set(before[:3]), (before, after)
    assert sorted(set(before + after)) == sorted(before[:3] + after) and len(set(before + after)) == CLUSTERS
    db = open_database(settings)
    try:
        stored = CommunityStore(db).all()
        assert len(stored) == CLUSTERS
        for community in stored:
            names = [m.removeprefix("CONCEPT:") for m in community.members]
            assert community.label_source == "model" and community.label.removeprefix("About ") in names, community
    finally:
        db.close()


@pytest.mark.both_backends
def test_a_database_of_the_previous_schema_gets_the_label_table(settings: Settings, backend: str) -> None:
    """A database written before migration 14 is migrated; a label kept there is found by its
    member set, and storing the communities drops the labels of member sets no longer stored."""
    rolled_back(settings, backend, to=COMMUNITY_NAMES_VERSION - 1)
    db = open_database(settings)
    try:
        assert db.schema_version >= COMMUNITY_NAMES_VERSION
        store = CommunityStore(db)
        store.keep_label("h-kept", "Lazy queue draining")
        store.keep_label("h-gone", "Chunker speed")
        store.keep_label("h-kept", "Queue draining")  # asked again (a member set named twice): the latest
        assert store.given_labels(["h-kept", "h-gone", "h-never"]) == {"h-kept": "Queue draining", "h-gone": "Chunker speed"}
        store.replace_all([CommunityRecord(id="c_1", label="Queue draining", members=("a", "b", "c"), member_hash="h-kept",
                                           label_source="model")])
        assert store.given_labels(["h-kept", "h-gone"]) == {"h-kept": "Queue draining"}
    finally:
        db.close()
