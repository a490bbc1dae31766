"""Generate deterministic sample coding-agent sessions for rem-cycle.

The output is a JSON Lines file with one session per line. Each session
holds the conversation turns between a developer, a coding agent and its
tools while working on a fictional Python/TypeScript codebase. The data is
meant for exercising the rem-cycle worker end to end: entity extraction
(CamelCase classes, method calls, file paths, issue numbers, URLs, people,
tools), decision detection, cross-session references (``memory:<turnId>``
and ``session:<sessionId>``), long-session chunking and a missing summary.

Usage::

    python examples/make_sessions.py [OUTPUT_PATH]

OUTPUT_PATH defaults to ``examples/sessions.jsonl`` inside the repository.
The generator only uses the standard library and is seeded, so repeated
runs produce byte-identical output.
"""

from __future__ import annotations

import json
import random
import re
import sys
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

SEED = 20261129
END = datetime(2026, 11, 29, tzinfo=timezone.utc)
DAYS = 20
SESSION_COUNT = 26
LONG_SESSION_CHARS = 32_000
HUGE_TURN_CHARS = 40_000
REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUTPUT = REPO_ROOT / "examples" / "sessions.jsonl"
ID_RE = re.compile(r"^[A-Za-z0-9_.:@+=-]{1,200}$")
REF_RE = re.compile(r"\b(memory|session):([A-Za-z0-9_.:@+=-]{1,200})")

Session = dict[str, Any]


@dataclass(frozen=True)
class Component:
    """A class in the fictional codebase together with where it lives."""

    name: str
    alias: str
    path: str
    test: str
    methods: tuple[str, ...]
    lang: str


@dataclass(frozen=True)
class Person:
    """A developer who talks to the agent."""

    name: str
    user_id: str


class TemplatePicker:
    """Draws templates from each pool without repetition until the pool is used up."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng
        self._bags: dict[tuple[str, ...], list[str]] = {}

    def pick(self, pool: tuple[str, ...]) -> str:
        """Return the next template of ``pool``, reshuffling when it runs out."""
        bag = self._bags.get(pool)
        if not bag:
            bag = list(pool)
            self._rng.shuffle(bag)
            self._bags[pool] = bag
        return bag.pop()


@dataclass
class SessionPlan:
    """Everything chosen up front for one session."""

    session_id: str
    created: datetime
    kind: str
    comp: Component
    comp2: Component
    method: str
    user: Person
    reviewer: str
    tool: str
    issue: int
    pr: int
    symptom: str
    decision: str
    long: bool
    huge: bool
    no_summary: bool
    picker: TemplatePicker


COMPONENTS: tuple[Component, ...] = (
    Component("LazyEdgeQueue", "the lazy edge queue", "src/queue/lazy_edges.py",
              "tests/test_drain.py", ("drain_queue()", "enqueue_edge()", "flush_pending()"),
              "py"),
    Component("SessionChunker", "the session chunker", "src/ingest/chunker.py",
              "tests/test_chunker.py", ("chunk_session()", "split_turns()", "estimate_tokens()"),
              "py"),
    Component("GraphStore", "the graph store", "src/store/graph.py",
              "tests/test_graph_store.py", ("upsert_node()", "upsert_edge()", "find_neighbors()"),
              "py"),
    Component("RetryPolicy", "the retry policy", "src/worker/retry.py",
              "tests/test_retry.py", ("next_delay()", "should_retry()", "reset()"),
              "py"),
    Component("TokenBucket", "the token bucket", "src/worker/ratelimit.py",
              "tests/test_ratelimit.py", ("try_acquire()", "refill()", "wait_for_tokens()"),
              "py"),
    Component("EntityExtractor", "the entity extractor", "src/extract/entities.py",
              "tests/test_entities.py", ("extract_entities()", "normalize_name()", "merge_aliases()"),
              "py"),
    Component("MemoryIngestor", "the memory ingestor", "src/ingest/memories.py",
              "tests/test_ingest.py", ("ingest_batch()", "load_session()", "mark_processed()"),
              "py"),
    Component("EdgeResolver", "the edge resolver", "src/graph/resolver.py",
              "tests/test_resolver.py", ("resolve_reference()", "link_memories()", "dedupe_edges()"),
              "py"),
    Component("CycleScheduler", "the cycle scheduler", "src/worker/scheduler.py",
              "tests/test_scheduler.py", ("run_cycle()", "schedule_next()", "pause()"),
              "py"),
    Component("EmbeddingCache", "the embedding cache", "src/cache/embeddings.py",
              "tests/test_embedding_cache.py", ("get_or_compute()", "evict_stale()", "warm_up()"),
              "py"),
    Component("SummaryWriter", "the summary writer", "src/extract/summary.py",
              "tests/test_summary.py", ("write_summary()", "truncate_to_budget()", "pick_highlights()"),
              "py"),
    Component("MigrationRunner", "the migration runner", "src/store/migrations.py",
              "tests/test_migrations.py", ("apply_pending()", "rollback()", "current_version()"),
              "py"),
    Component("ConfigLoader", "the config loader", "src/config.py",
              "tests/test_config.py", ("load_config()", "from_env()", "validate()"),
              "py"),
    Component("WebhookDispatcher", "the webhook dispatcher", "web/src/webhooks/dispatcher.ts",
              "web/src/webhooks/dispatcher.test.ts", ("dispatchEvent()", "signPayload()", "retryFailed()"),
              "ts"),
    Component("GraphExplorerPanel", "the graph explorer panel", "web/src/components/GraphExplorerPanel.tsx",
              "web/src/components/GraphExplorerPanel.test.tsx", ("renderNodes()", "onNodeClick()", "fetchNeighbors()"),
              "ts"),
    Component("ApiClient", "the API client", "web/src/api/client.ts",
              "web/src/api/client.test.ts", ("fetchGraph()", "postFeedback()", "withAuth()"),
              "ts"),
)

PEOPLE: tuple[Person, ...] = (
    Person("Maria Chen", "u-maria.chen"),
    Person("Tomás Herrera", "u-tomas.herrera"),
    Person("Priya Natarajan", "u-priya.n"),
    Person("Jonas Weber", "u-jonas.weber"),
    Person("Aiko Tanaka", "u-aiko.tanaka"),
    Person("Samuel Okafor", "u-sam.okafor"),
)
REVIEWERS = ("Léa Dubois", "Dmitri Volkov", "Maria Chen", "Jonas Weber", "Grace Mwangi", "Ravi Iyer")
TOOLS = ("Docker Compose", "GitHub Actions", "PostgreSQL", "Redis", "pytest", "mypy", "Ruff",
         "Vitest", "Playwright", "Sentry", "Grafana", "OpenTelemetry", "SQLAlchemy", "FastAPI")
DOCS = ("docs/ARCHITECTURE.md", "docs/RUNBOOK.md", "docs/adr/0007-lazy-edges.md", "README.md",
        "CHANGELOG.md", "docs/CONTRIBUTING.md", "docs/adr/0011-retry-budget.md")
ISSUES = (123, 187, 402, 588, 731, 902, 1170, 1288, 1456, 1893, 2044, 2310, 2571, 2719,
          3006, 3342, 3581, 3907, 4120, 4512, 4788)
CASES = ("empty_session", "duplicate_ids", "unicode_names", "concurrent_workers", "zero_budget",
         "restart_mid_batch", "naive_datetime", "huge_turn")
EXCEPTIONS = (
    "asyncpg.exceptions.SerializationError: could not serialize access due to concurrent update",
    "asyncpg.exceptions.DeadlockDetectedError: deadlock detected",
    "KeyError: 'sessionId'",
    "TimeoutError: drain_queue() exceeded 30.0s budget",
    "ValueError: turn createdAt is not monotonic (2026-11-14T10:03:11Z < 2026-11-14T10:03:09Z)",
    "RuntimeError: Event loop is closed",
    "TypeError: can't compare offset-naive and offset-aware datetimes",
)
LEGACY_REFERENCES = (
    "There is an older note about this, `memory:legacy-0042`, from before we migrated the memory store. "
    "It may not resolve anymore, but it said the drain loop must never block on PostgreSQL.",
    "For the original design discussion see session:legacy-2025-03-01 (it predates rem-cycle, so the "
    "worker will probably not find it). The gist was: edges are cheap, nodes are expensive.",
    "Heads-up: memory:legacy-0117 in the old wiki export described the same retry storm. "
    "I don't think that memory was imported, so treat it as historical context only.",
)

TITLES: dict[str, tuple[str, ...]] = {
    "bugfix": ("Fix {alias} {symptom} (#{issue})", "{C} bug: {symptom}",
               "Investigate #{issue}: {C} {symptom}"),
    "refactor": ("Refactor {C} to decouple it from {C2}", "Split {f} into smaller modules",
                 "Clean up {m} in {C}"),
    "tests": ("Add tests for {C}.{mname}", "Raise coverage of {f}", "Regression tests for #{issue}"),
    "review": ("Review PR #{pr} ({C} changes)", "PR #{pr} review: {alias} and {alias2}",
               "Code review for {reviewer}'s {C} patch"),
    "ci": ("Debug flaky {t} on GitHub Actions", "CI red on main: {C} tests",
           "Fix intermittent CI failure in {t}"),
    "perf": ("Speed up {m} in {C}", "Profile {alias} latency regression (#{issue})",
             "Reduce p95 of {C}.{mname}"),
    "docs": ("Update {doc} for {C}", "Document how {alias} talks to {alias2}",
             "ARCHITECTURE notes for {C}"),
}
SYMPTOMS = ("dropping edges under load", "double-counting nodes", "hanging on shutdown",
            "raising KeyError on empty sessions", "returning stale results", "leaking file handles",
            "timing out against PostgreSQL", "producing duplicate edges", "ignoring the retry budget",
            "crashing on naïve datetimes")
DECISIONS: dict[str, tuple[str, ...]] = {
    "bugfix": ("make {m} idempotent and let {C2} retry it through RetryPolicy",
               "guard {m} with an asyncio.Lock instead of relying on call ordering",
               "treat empty sessions as a no-op in {C} rather than raising",
               "normalise every timestamp to UTC at the edge of {C} and reject naïve datetimes"),
    "refactor": ("extract the persistence code from {C} into a new {C}Repository class",
                 "hide {C2} behind a Protocol so {C} can be tested with a fake",
                 "keep {m} as a thin wrapper for one release and deprecate it afterwards"),
    "tests": ("use Hypothesis for the property tests of {m} and keep examples for the regressions",
              "run the {C} tests against a real PostgreSQL via Docker Compose instead of mocks",
              "share one fixture factory for {C} and {C2} in tests/conftest.py"),
    "review": ("request changes until {m} has a regression test",
               "merge the {C} part now and split the {C2} change into a follow-up PR",
               "accept the PR once the public signature of {m} stays backwards compatible"),
    "ci": ("pin the PostgreSQL service image in .github/workflows/ci.yml and add a readiness probe",
           "mark the timing-sensitive {C} test as serial and give it a fake clock",
           "stop sharing the Redis database between parallel pytest workers"),
    "perf": ("batch {m} calls in groups of 500 and use a single transaction",
             "cache the results of {m2} in EmbeddingCache with a 10 minute TTL",
             "replace the per-edge SELECT in {m} with one INSERT ... ON CONFLICT"),
    "docs": ("keep {doc} as the single source of truth and link it from README.md",
             "add a sequence diagram for {m} and {m2} to docs/ARCHITECTURE.md",
             "write a short ADR for the {C} design instead of a long README section"),
}
OPENERS: dict[str, tuple[str, ...]] = {
    "bugfix": (
        "{alias} is {symptom} again, see #{issue}. Can you take a look at {f} and figure out why {m} misbehaves?",
        "Bug report from {reviewer}: {C} is {symptom} when the worker restarts. Issue #{issue} has the details. Start with {f}.",
        "We're getting paged because {alias} keeps {symptom}. Please investigate #{issue}; I suspect {m}. Sentry link: {url}",
    ),
    "refactor": (
        "{C} in {f} has grown to {n1} lines. Can you split it up? Keep the public API ({m}) stable.",
        "I'd like to refactor {alias} so it no longer reaches into {C2} directly. Ticket is #{issue}.",
        "{m} does three things at once. Please refactor {C} so that each responsibility is testable on its own.",
    ),
    "tests": (
        "Coverage for {f} is at {pct}%. Please write tests for {m} in {t}, especially the edge cases from #{issue}.",
        "We have no tests for {alias} at all. Add some to {t} before {reviewer} starts the refactor in #{issue}.",
        "Can you add regression tests for #{issue}? The bug was in {C}.{mname} and I don't want it back.",
    ),
    "review": (
        "Can you review PR #{pr}? It touches {f} and {f2}. {reviewer} wrote it and wants feedback before Friday.",
        "Please do a thorough review of PR #{pr} ({url}). It changes how {C} calls {m2} on {C2}.",
        "{reviewer} opened PR #{pr} to fix #{issue}. Review it with a focus on concurrency in {alias}.",
    ),
    "ci": (
        "CI is red on main again: {t} fails intermittently on GitHub Actions. Run is at {url}. Can you debug it?",
        "The {C} job in GitHub Actions has been flaky since #{issue2} landed. Roughly 1 in {n2} runs fail. Please find out why.",
        "Nightly CI failed in {t} with a timeout. Works on my machine with Docker Compose. Logs: {url}",
    ),
    "perf": (
        "{m} in {C} got slow after #{issue2}. p95 went from {ms}ms to {ms2}ms on the Grafana dashboard ({url}). Please profile it.",
        "The worker spends most of its cycle in {alias}. Can you make {m} faster without changing behaviour? Tracking in #{issue}.",
        "{reviewer} noticed {C} doing {n1} round-trips to PostgreSQL per session. Let's fix that, see #{issue}.",
    ),
    "docs": (
        "{doc} is out of date since we introduced {C}. Please update it and describe how {m} interacts with {alias2}.",
        "New people keep asking how {alias} works. Can you write it up in {doc}? Link #{issue} for background.",
        "Please document the contract of {m} (inputs, retries, failure modes) in {doc}. {reviewer} will review.",
    ),
}
PLANS = (
    "I'll start by reading {f} and {t} to understand how {m} is used, then reproduce the problem with {tool}.",
    "Plan:\n1. Read {f} and locate {m}.\n2. Check how {C2} calls into it via {m2}.\n3. Write a failing test in {t}.\n4. Fix it and run the full suite.",
    "Let me first look at the call sites of {m} across src/ and the existing tests in {t}. After that I'll check {doc} for the intended behaviour.",
    "Sure. I'll search for usages of {C}, read {f}, and check whether #{issue2} touched the same code path.",
)
ANALYSES = (
    "Found it. {m} in {f} iterates over a list that {C2} mutates from another task, so under load some items are skipped.",
    "The root cause is in {C}.{mname}: it swallows the exception from {m2} and returns an empty result, which the caller interprets as 'nothing to do'.",
    "{m} is called {n1} times per cycle because {alias2} doesn't cache the result. That explains the latency on the Grafana panel.",
    "Looking at {f}, the lock is acquired in {m} but released in a finally block of {m2}, so an early return leaks it.",
    "The failing assertion in {t} compares a naïve datetime with an aware one. {C} should normalise to UTC before comparing.",
    "There's an off-by-one in {m}: the last turn of each chunk is dropped when the session length is a multiple of the batch size.",
    "The test relies on wall-clock time; on GitHub Actions the runner is slower and {m} hits its 30s budget.",
    "{C} and {C2} both write the same row in PostgreSQL without ON CONFLICT handling, which produces the duplicate edges from #{issue}.",
    "{C}.{mname} builds its SQL with string formatting; with {n2} concurrent workers PostgreSQL ends up with lock waits on the edges table.",
    "The retry loop around {m} retries on every exception, including ValueError, so bad input is retried {n2} times before it fails.",
    "{alias2} calls {m} before the migration in src/store/migrations.py has run, so the new column is missing on fresh databases.",
    "The regression came in with #{issue2}: {m} now loads the full session instead of the chunk that SessionChunker produced.",
)
EDITS = (
    "I've changed {m} in {f} to take a snapshot of the pending items before iterating and added a test in {t}.",
    "Updated {f}: {m} now re-raises the error from {m2} wrapped in {C}Error so the scheduler can retry it.",
    "I extracted the SQL from {m} into a helper and made {C2} call it with a single batch.",
    "Edited {f} and {t}. The fix is about {n2} lines; most of the diff is the new test for #{issue}.",
    "Replaced the sleep-based wait in {t} with a fake clock fixture, so the test no longer depends on runner speed.",
    "Moved the retry logic out of {C} into RetryPolicy and injected it through the constructor.",
    "Added an early return to {m} for empty input and a test case `test_{mname}_{case}` in {t}.",
    "Wrapped the two writes in {m} in a single transaction; {C2} no longer sees half-written state.",
    "Renamed the private helper `_do_{mname}` to make the call graph clearer and updated the call sites in {f} and {f2}.",
)
FOLLOW_UPS = (
    "Makes sense. Does this also affect {alias2}?",
    "Before you change {f2}, check what {reviewer} said in #{issue2}.",
    "Can you also add a regression test for #{issue}?",
    "{tool} is available locally, so please use that instead of mocks.",
    "Ok, go ahead. Keep the diff small please.",
    "What about naïve datetimes from the old importer? Those broke {C2} last month.",
    "Hmm, I'm not sure about that. Why not just call {m2} directly?",
    "Is {m} part of the public API? The Zürich team uses it from their dashboard.",
    "Please don't touch {doc} yet, {reviewer} is rewriting it.",
    "Good catch 👀. How did this ever pass review?",
    "Can you explain why {alias} needs the lock at all? I thought the scheduler was single-threaded.",
    "{reviewer} mentioned the same thing in standup. Is it the same root cause as #{issue2}?",
    "Let's not block on this; open a follow-up issue for the {C2} part.",
    "Run the whole suite, not just {t}, please.",
)
ANSWERS = (
    "Yes, {C2} uses the same pattern in {f2}, but it only runs during startup, so it can't race. I'll leave it alone and mention it in the PR description.",
    "Calling {m2} directly would bypass the retry budget in RetryPolicy, which is what caused #{issue2}. Going through {C} keeps that guarantee.",
    "{m} is imported by web/src/api/client.ts via the FastAPI route, so I'll keep its signature unchanged and add a keyword-only argument instead.",
    "Checked #{issue2}: {reviewer} suggested keeping the behaviour behind a flag. I'll add `REM_CYCLE_STRICT_{upper}` defaulting to off.",
    "It passed because the test fixture always creates sessions with exactly one turn, so the faulty branch was never exercised.",
    "Done, I'm using the PostgreSQL service from Docker Compose now; the tests take {sec}s instead of {sec2}s but cover the real constraint behaviour.",
    "The scheduler is single-threaded, but {m} awaits inside the critical section, so another task can interleave there. That's why the lock is needed.",
    "Not the same root cause as #{issue2}, but related: both come from {C2} holding on to a stale connection.",
    "Opened a follow-up issue for {C2} and linked it from #{issue}.",
    "Full suite: {n3} passed, 2 skipped in {sec}s. Nothing else regressed.",
)
TOOL_OUTPUTS: dict[str, tuple[str, ...]] = {
    "search": (
        "$ rg -n \"{mname}\" src tests web/src\n{f}:{n1}:    def {mname}(self, *args, **kwargs):\n{f2}:{n2}:        await self._{lower}.{mname}(batch)\n{t}:{n3}:    result = {lower}.{mname}([])",
        "$ rg -n \"class {C}\" -g '*.py' -g '*.ts*'\n{f}:{n1}:class {C}:\n{t}:{n2}:class Fake{C}({C}):",
        "$ git log --oneline -5 -- {f}\n{sha1} Fix {mname} when batch is empty (#{issue2})\n{sha2} Add {C} metrics\n{sha3} Initial {C} implementation",
    ),
    "fail": (
        "$ {run}\n..F.....\nFAILED {t}::test_{mname}_{case} - AssertionError: assert {n1} == {n2}\n1 failed, {n3} passed in {sec}s",
        "$ {run}\nE       {exc}\n\n{t}:{n1}: in test_{mname}_{case}\n1 failed, {n3} passed, 2 warnings in {sec}s",
    ),
    "pass": (
        "$ {run}\n{n3} passed in {sec}s",
        "$ {run}\n{n3} passed, 1 skipped in {sec}s\n$ mypy src/\nSuccess: no issues found in {n2} source files",
        "$ ruff check src tests && {run}\nAll checks passed!\n{n3} passed in {sec}s ✅",
    ),
    "diff": (
        "$ git diff --stat\n {f} | {n1} +++++++---\n {t} | {n2} ++++++++++\n 2 files changed, {n3} insertions(+), {n1} deletions(-)",
        "$ git diff --stat\n {f}  | {n1} ++++--\n {f2} | {n2} ++-\n {doc} | 6 ++++\n 3 files changed",
    ),
    "infra": (
        "$ docker compose up -d postgres redis\n[+] Running 2/2\n ✔ Container remcycle-postgres-1  Started\n ✔ Container remcycle-redis-1     Started",
        "$ gh run view {n3}{n1} --log-failed | tail -3\nci / test (3.11)  {exc}\nci / test (3.11)  Error: Process completed with exit code 1.",
    ),
}
DECISION_TURNS = (
    "We decided to {decision}. I've noted it in {doc} so it's discoverable later.",
    "Decision: {decision}. {reviewer} agreed in the PR thread, and I added a comment above {m} explaining why.",
    "After discussing the options we decided to {decision}. The alternative (patching {C2}) would have hidden the problem.",
)
CLOSERS = (
    "Thanks, merging. Please post a short note in the channel for {reviewer}.",
    "Great, that works for me. Open the PR and tag {reviewer}.",
    "Perfect 🎉 Let's ship it.",
    "Looks good. Please also add a CHANGELOG.md entry.",
)
FINALS = (
    "Summary of changes:\n- {f}: fixed {m} and added type hints\n- {t}: {n2} new tests\n- {doc}: documented the decision\nAll {n3} tests pass. Closes #{issue}.",
    "Opened PR #{pr} ({prurl}). It updates {f} and {t}, and references #{issue}. CI is green on GitHub Actions.",
    "Done. The change is in PR #{pr}; {reviewer} is requested as reviewer. I left a TODO in {f2} for the {C2} follow-up.",
)
SUMMARY_LEADS: dict[str, str] = {
    "bugfix": "{person} asked the agent to investigate #{issue}, where {C} in {f} was {symptom}.",
    "refactor": "{person} asked for a refactor of {C} in {f} to reduce its coupling to {C2}.",
    "tests": "{person} asked the agent to add tests for {C} ({m}) in {t}, tracked in #{issue}.",
    "review": "{person} asked the agent to review PR #{pr} by {reviewer}, which changes {C} and {C2}.",
    "ci": "{person} asked the agent to debug a flaky {t} job on GitHub Actions affecting {C}.",
    "perf": "{person} asked the agent to speed up {m} in {C} after a latency regression (#{issue}).",
    "docs": "{person} asked the agent to document {C} and its interaction with {C2}.",
}
SUMMARY_MIDDLES = (
    "The agent traced the problem to {m} and updated {f} and {t}.",
    "The agent read {f}, ran {tool} locally and found that {m} interacted badly with {m2} in {C2}.",
    "Most of the work happened in {f}, with new tests in {t}.",
)
SUMMARY_TAILS = (
    "{reviewer} will review the follow-up in PR #{pr}.",
    "The result was written up in {doc}.",
    "CI on GitHub Actions is green again.",
)
LOG_MESSAGES = (
    ("INFO", "rem_cycle.worker.scheduler run_cycle cycle={a} sessions={b} pending_edges={c} took_ms={d}"),
    ("INFO", "rem_cycle.queue.lazy_edges drain_queue batch={a} drained={b} remaining={c}"),
    ("DEBUG", "rem_cycle.store.graph upsert_node label=Class name={cls} ok=true took_ms={d}"),
    ("DEBUG", "rem_cycle.cache.embeddings get_or_compute key=turn:{a} hit=false took_ms={d}"),
    ("WARN", "rem_cycle.worker.retry next_delay attempt={a} delay_ms={d} reason=SerializationFailure"),
    ("WARN", "rem_cycle.worker.ratelimit try_acquire denied tokens={a} capacity={b}"),
    ("ERROR", "rem_cycle.store.graph upsert_edge failed src={cls} dst={cls2}: could not serialize access (PostgreSQL 40001)"),
    ("INFO", "rem_cycle.ingest.chunker chunk_session chunks={a} est_tokens={c}"),
    ("INFO", "rem_cycle.graph.resolver resolve_reference ref_turn={a} status=unresolved"),
    ("DEBUG", "rem_cycle.extract.entities extract_entities found={a} classes={b} files={c}"),
)
PY_BODY = (
    "        if not {arg}:\n            return []",
    "        async with self._lock:\n            pending = list(self._pending)",
    "        for item in {arg}:\n            await self._store.upsert_edge(item.src, item.dst, kind=item.kind)",
    "        delay = self._policy.next_delay(attempt)\n        await asyncio.sleep(delay)",
    "        log.info(\"{mname} done\", extra={{\"count\": len({arg})}})",
    "        started = time.monotonic()\n        result = await self._{lower2}.{mname2}({arg})\n        self._metrics.observe(\"{mname}\", time.monotonic() - started)",
    "        if self._closed:\n            raise {C}Error(\"{mname}() called after close()\")",
    "        created = {arg}[0].created_at.astimezone(timezone.utc)",
)
TS_BODY = (
    "    if ({arg}.length === 0) {{\n      return [];\n    }}",
    "    const started = performance.now();\n    const res = await this.{lower2}.{mname2}({arg});\n    this.metrics.observe('{mname}', performance.now() - started);",
    "    for (const item of {arg}) {{\n      await this.client.post('/graph/edges', item);\n    }}",
    "    if (this.closed) {{\n      throw new {C}Error('{mname}() called after close()');\n    }}",
)


def iso(moment: datetime) -> str:
    """Format a UTC datetime as ``YYYY-MM-DDTHH:MM:SSZ``."""
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def snake(name: str) -> str:
    """Convert a CamelCase class name to snake_case."""
    return "".join(f"_{ch.lower()}" if ch.isupper() and i else ch.lower() for i, ch in enumerate(name))


def make_url(rng: random.Random) -> str:
    """Return a plausible https://example.com link."""
    return rng.choice((
        f"https://example.com/ci/runs/{rng.randint(70000, 99999)}",
        "https://example.com/grafana/d/worker-latency?from=now-24h",
        f"https://example.com/sentry/issues/{rng.randint(1000, 9999)}",
        "https://example.com/docs/graph-schema",
        "https://example.com/runbook#drain-stalls",
    ))


def turn_ctx(plan: SessionPlan, rng: random.Random) -> dict[str, str]:
    """Build the template fields for one turn, mixing fixed and random picks."""
    comp, comp2 = plan.comp, plan.comp2
    method, method2 = plan.method, rng.choice(comp2.methods)
    run = f"pytest {comp.test} -q" if comp.lang == "py" else f"npx vitest run {comp.test}"
    ms = rng.randint(40, 400)
    return {
        "C": comp.name, "alias": comp.alias, "f": comp.path, "t": comp.test, "m": method,
        "mname": method[:-2], "lower": snake(comp.name), "upper": snake(comp.name).upper(),
        "C2": comp2.name, "alias2": comp2.alias, "f2": comp2.path, "m2": method2,
        "issue": str(plan.issue), "issue2": str(rng.choice(ISSUES)), "pr": str(plan.pr),
        "prurl": f"https://example.com/pulls/{plan.pr}", "person": plan.user.name,
        "reviewer": plan.reviewer, "tool": plan.tool, "doc": rng.choice(DOCS), "url": make_url(rng),
        "n1": str(rng.randint(3, 480)), "n2": str(rng.randint(2, 60)), "n3": str(rng.randint(20, 640)),
        "ms": str(ms), "ms2": str(ms * rng.randint(3, 9)), "pct": str(rng.randint(18, 71)),
        "sec": f"{rng.uniform(0.4, 48):.2f}", "sec2": f"{rng.uniform(0.1, 3):.2f}",
        "symptom": plan.symptom, "decision": plan.decision, "case": rng.choice(CASES), "run": run,
        "exc": rng.choice(EXCEPTIONS), "sha1": f"{rng.getrandbits(28):07x}",
        "sha2": f"{rng.getrandbits(28):07x}", "sha3": f"{rng.getrandbits(28):07x}",
    }


def fill(rng: random.Random, plan: SessionPlan, templates: tuple[str, ...]) -> str:
    """Pick a template not yet used in this session and fill it with fresh turn fields."""
    return plan.picker.pick(templates).format(**turn_ctx(plan, rng))


def make_log(rng: random.Random, start: datetime, target_chars: int) -> str:
    """Generate worker log lines until the text reaches ``target_chars``."""
    lines: list[str] = []
    size = 0
    moment = start
    while size < target_chars:
        moment += timedelta(milliseconds=rng.randint(3, 900))
        level, message = rng.choice(LOG_MESSAGES)
        cls, cls2 = rng.sample(COMPONENTS, 2)
        text = message.format(a=rng.randint(1, 9999), b=rng.randint(0, 500), c=rng.randint(0, 20000),
                              d=rng.randint(1, 4000), cls=cls.name, cls2=cls2.name)
        line = f"{moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')} {level:<5} [worker-{rng.randint(1, 4)}] {text}"
        lines.append(line)
        size += len(line) + 1
    return "\n".join(lines)


def make_traceback(rng: random.Random, plan: SessionPlan) -> str:
    """Generate a chained Python traceback through several components."""
    parts: list[str] = []
    for chain in range(rng.randint(2, 3)):
        python = [comp for comp in COMPONENTS if comp.lang == "py" and comp not in (plan.comp, plan.comp2)]
        frames = [plan.comp, *rng.sample(python, rng.randint(3, 6)), plan.comp2]
        methods = [rng.choice(frame.methods)[:-2] for frame in frames]
        parts.append("Traceback (most recent call last):")
        for here, method, nxt, called in zip(frames, methods, frames[1:], methods[1:]):
            parts.append(f'  File "/app/{here.path}", line {rng.randint(20, 600)}, in {method}')
            parts.append(f"    return await self._{snake(nxt.name)}.{called}(batch)")
        parts.append(rng.choice(EXCEPTIONS))
        if chain == 0:
            parts.append("\nThe above exception was the direct cause of the following exception:\n")
        else:
            parts.append("\nDuring handling of the above exception, another exception occurred:\n")
    parts.append(f"{plan.comp.name}Error: {plan.comp.methods[0]} failed for session batch of {rng.randint(8, 64)}")
    return "\n".join(parts)


def make_code(rng: random.Random, plan: SessionPlan) -> str:
    """Generate a fenced code block showing part of the primary component."""
    comp, comp2 = plan.comp, plan.comp2
    blocks: list[str] = []
    for method in comp.methods:
        method2 = rng.choice(comp2.methods)
        fields = {"arg": "batch", "mname": method[:-2], "mname2": method2[:-2], "C": comp.name,
                  "lower2": snake(comp2.name)}
        if comp.lang == "py":
            body = "\n".join(line.format(**fields) for line in rng.sample(PY_BODY, 4))
            blocks.append(f"    async def {method[:-2]}(self, batch: list[Turn]) -> list[Edge]:\n"
                          f"        \"\"\"{method} for {comp.alias}; see #{plan.issue}.\"\"\"\n{body}\n        return pending")
        else:
            fields["lower2"] = comp2.name[0].lower() + comp2.name[1:]
            body = "\n".join(line.format(**fields) for line in rng.sample(TS_BODY, 3))
            blocks.append(f"  async {method[:-2]}(batch: Turn[]): Promise<Edge[]> {{\n{body}\n    return batch;\n  }}")
    if comp.lang == "py":
        header = (f"```python\n# {comp.path}\nclass {comp.name}:\n    \"\"\"Coordinates {comp.alias} with {comp2.name}.\"\"\"\n\n"
                  f"    def __init__(self, store: GraphStore, policy: RetryPolicy | None = None) -> None:\n"
                  f"        self._store = store\n        self._policy = policy or RetryPolicy()\n"
                  f"        self._lock = asyncio.Lock()\n        self._pending: list[Edge] = []\n\n")
        return header + "\n\n".join(blocks) + "\n```"
    header = (f"```ts\n// {comp.path}\nexport class {comp.name} {{\n  private closed = false;\n\n"
              f"  constructor(private readonly client: ApiClient, private readonly metrics: Metrics) {{}}\n\n")
    return header + "\n\n".join(blocks) + "\n}\n```"


def long_tool_output(rng: random.Random, plan: SessionPlan, moment: datetime) -> str:
    """A 1,000-4,000 character tool result: a failing test run or a log tail."""
    ctx = turn_ctx(plan, rng)
    if rng.random() < 0.5:
        return (f"$ {ctx['run']}\n{'=' * 30} FAILURES {'=' * 30}\n{'_' * 12} test_{ctx['mname']}_{ctx['case']} {'_' * 12}\n\n"
                f"{make_traceback(rng, plan)}\n\nFAILED {ctx['t']}::test_{ctx['mname']}_{ctx['case']}\n"
                f"1 failed, {ctx['n3']} passed in {ctx['sec']}s")
    return f"$ docker compose logs worker --since 10m | tail -n 40\n{make_log(rng, moment, rng.randint(1500, 3800))}"


def long_assistant(rng: random.Random, plan: SessionPlan) -> str:
    """A long assistant turn combining analysis, a code block and next steps."""
    return (f"{fill(rng, plan, ANALYSES)}\n\nHere is the relevant part of {plan.comp.path} as it stands now:\n\n"
            f"{make_code(rng, plan)}\n\n{fill(rng, plan, EDITS)} Next I'll rerun {plan.comp.test} and check "
            f"the worker logs in Grafana ({make_url(rng)}).")


def build_turns(rng: random.Random, plan: SessionPlan, references: list[str]) -> list[tuple[str, str]]:
    """Create (role, text) pairs for a session in conversational order."""
    turns: list[tuple[str, str]] = [("user", fill(rng, plan, OPENERS[plan.kind])), ("assistant", fill(rng, plan, PLANS))]
    if plan.huge:
        turns.append(("user", "Here's the full worker log from the staging run in Zürich, sorry for the wall of text:\n"
                              + make_log(rng, plan.created, HUGE_TURN_CHARS - 200)))
    target = rng.randint(24, 34)
    steps: tuple[tuple[tuple[str, str], ...], ...] = (
        (("tool", "search"), ("assistant", "analysis")),
        (("tool", "fail"), ("assistant", "analysis"), ("assistant", "edit")),
        (("user", "follow"), ("assistant", "answer")),
        (("assistant", "edit"), ("tool", "diff"), ("tool", "pass")),
        (("tool", "infra"), ("assistant", "analysis")),
    )
    pools = {"analysis": ANALYSES, "edit": EDITS, "follow": FOLLOW_UPS, "answer": ANSWERS}
    while len(turns) < target or (plan.long and sum(len(t) for _, t in turns) < LONG_SESSION_CHARS):
        for role, what in rng.choice(steps):
            if role == "tool" and plan.long and what in ("fail", "infra"):
                text = long_tool_output(rng, plan, plan.created + timedelta(minutes=2 * len(turns)))
            elif role == "tool":
                text = fill(rng, plan, TOOL_OUTPUTS[what])
            elif plan.long and what == "analysis":
                text = long_assistant(rng, plan)
            else:
                text = fill(rng, plan, pools[what])
            turns.append((role, text))
        if len(turns) > 4 and references:
            turns.append(("user" if len(references) % 2 else "assistant", references.pop()))
    turns.append(("assistant", fill(rng, plan, DECISION_TURNS)))
    turns.append(("user", fill(rng, plan, CLOSERS)))
    turns.append(("assistant", fill(rng, plan, FINALS)))
    return turns


def reference_texts(rng: random.Random, plan: SessionPlan, earlier: list[Session]) -> list[str]:
    """Texts that point at memories/sessions of earlier sessions, preferring related ones."""
    related = [s for s in earlier if plan.comp.name in s["title"] or plan.comp.name in s["_comps"]]
    pool = related or earlier
    texts: list[str] = []
    for old in rng.sample(pool, min(len(pool), rng.choice((1, 1, 2)))):
        turn_id = old["_decision_turn"]
        texts.append(rng.choice((
            f"This feels like déjà vu — we hit something similar in `session:{old['sessionId']}`. "
            f"Can you check `memory:{turn_id}` before changing {plan.comp.name}?",
            f"According to memory:{turn_id} (from session:{old['sessionId']}), we decided to "
            f"{old['_decision']}. That still applies here, so I'll keep {plan.comp.alias} consistent with it.",
            f"Cross-check with session:{old['sessionId']}, where \"{old['title']}\" was handled "
            f"(see memory:{turn_id}), before we merge.",
        )))
    return texts


def make_plan(rng: random.Random, index: int, created: datetime, long_set: set[int],
              huge_index: int, no_summary_index: int) -> SessionPlan:
    """Choose the kind, components, people and decision for one session."""
    kind = rng.choice(("bugfix", "perf", "ci")) if index in long_set else rng.choice(tuple(OPENERS))
    comp, comp2 = rng.sample(COMPONENTS, 2)
    method = rng.choice(comp.methods)
    fields = {"C": comp.name, "C2": comp2.name, "m": method, "m2": rng.choice(comp2.methods),
              "doc": rng.choice(DOCS)}
    return SessionPlan(
        session_id=f"sess-{created:%Y-%m-%d}-{rng.getrandbits(24):06x}",
        created=created, kind=kind, comp=comp, comp2=comp2, method=method, user=rng.choice(PEOPLE),
        reviewer=rng.choice(REVIEWERS), tool=rng.choice(TOOLS), issue=rng.choice(ISSUES),
        pr=rng.randint(4600, 5200), symptom=rng.choice(SYMPTOMS),
        decision=rng.choice(DECISIONS[kind]).format(**fields), long=index in long_set,
        huge=index == huge_index, no_summary=index == no_summary_index, picker=TemplatePicker(rng),
    )


def make_summary(rng: random.Random, plan: SessionPlan) -> str:
    """Write a 3-4 sentence summary mentioning the main entities."""
    ctx = turn_ctx(plan, rng)
    sentences = [SUMMARY_LEADS[plan.kind].format(**ctx), rng.choice(SUMMARY_MIDDLES).format(**ctx),
                 f"The team decided to {plan.decision}."]
    if rng.random() < 0.6:
        sentences.append(rng.choice(SUMMARY_TAILS).format(**ctx))
    return " ".join(sentences)


def generate(rng: random.Random) -> list[Session]:
    """Generate all sessions in chronological order."""
    starts = sorted(END - timedelta(days=DAYS) + timedelta(days=rng.randrange(DAYS), hours=rng.randint(7, 17),
                                                           minutes=rng.randrange(60))
                    for _ in range(SESSION_COUNT))
    long_set = set(rng.sample(range(4, SESSION_COUNT - 1), 3))
    huge_index = min(long_set)
    no_summary_index = rng.choice([i for i in range(3, SESSION_COUNT) if i not in long_set])
    legacy_at = set(rng.sample([i for i in range(5, SESSION_COUNT) if i not in long_set], len(LEGACY_REFERENCES)))
    legacy = list(LEGACY_REFERENCES)
    sessions: list[Session] = []
    for index, created in enumerate(starts):
        plan = make_plan(rng, index, created, long_set, huge_index, no_summary_index)
        refs = reference_texts(rng, plan, sessions) if index >= 2 else []
        if index in legacy_at:
            refs.insert(0, legacy.pop())
        moment = created
        turns: list[dict[str, str]] = []
        decision_turn = ""
        for number, (role, text) in enumerate(build_turns(rng, plan, refs), start=1):
            moment += timedelta(seconds=rng.randint(12, 40) if role == "tool" else rng.randint(30, 420))
            turn_id = f"{plan.session_id}-t{number:04d}"
            if "decided" in text or text.startswith("Decision:"):
                decision_turn = turn_id
            turns.append({"id": turn_id, "role": role, "text": text, "createdAt": iso(moment)})
        ctx = turn_ctx(plan, rng)
        session: Session = {"sessionId": plan.session_id, "title": rng.choice(TITLES[plan.kind]).format(**ctx),
                            "createdAt": iso(created), "userId": plan.user.user_id}
        if plan.no_summary:
            session["noSummary"] = True
        else:
            session["summary"] = make_summary(rng, plan)
        session["turns"] = turns
        session["_comps"] = f"{plan.comp.name} {plan.comp2.name}"
        session["_decision"] = plan.decision
        session["_decision_turn"] = decision_turn
        sessions.append(session)
    return sessions


def report(path: Path) -> None:
    """Re-read the written file, check the invariants and print a short report."""
    sessions = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    turn_ids = {turn["id"]: session["sessionId"] for session in sessions for turn in session["turns"]}
    order = {session["sessionId"]: index for index, session in enumerate(sessions)}
    resolved = unresolved = ref_turns = 0
    missing: set[str] = set()
    for index, session in enumerate(sessions):
        assert ID_RE.match(session["sessionId"]) and ("summary" in session) != session.get("noSummary", False)
        stamps = [turn["createdAt"] for turn in session["turns"]]
        assert stamps == sorted(stamps) and session["createdAt"] < stamps[0] and len(set(stamps)) == len(stamps)
        for turn in session["turns"]:
            assert ID_RE.match(turn["id"]) and turn["role"] in ("user", "assistant", "tool")
            refs = REF_RE.findall(turn["text"])
            ref_turns += bool(refs)
            for kind, ref in refs:
                owner = turn_ids.get(ref) if kind == "memory" else (ref if ref in order else None)
                if owner is None:
                    unresolved += 1
                    missing.add(f"{kind}:{ref}")
                else:
                    assert order[owner] < index, f"{ref} is not from an earlier session"
                    resolved += 1
    sizes = {session["sessionId"]: sum(len(turn["text"]) for turn in session["turns"]) for session in sessions}
    biggest_turn = max(len(turn["text"]) for session in sessions for turn in session["turns"])
    print(f"sessions: {len(sessions)}  turns: {len(turn_ids)}  file bytes: {path.stat().st_size}")
    print(f"createdAt range: {sessions[0]['createdAt']} .. {sessions[-1]['createdAt']}")
    print(f"noSummary sessions: {[s['sessionId'] for s in sessions if s.get('noSummary')]}")
    print(f"long sessions (>=30000 chars): {[(k, v) for k, v in sizes.items() if v >= 30_000]}")
    print(f"largest turn: {biggest_turn} chars; median session: {sorted(sizes.values())[len(sizes) // 2]} chars")
    print(f"turns with references: {ref_turns}; resolved refs: {resolved}; unresolved refs: {unresolved} {sorted(missing)}")


def main(argv: list[str]) -> None:
    """Write the sessions to the path in argv[1] (or the default path)."""
    out = Path(argv[1]) if len(argv) > 1 else DEFAULT_OUTPUT
    out.parent.mkdir(parents=True, exist_ok=True)
    sessions = generate(random.Random(SEED))
    with out.open("w", encoding="utf-8", newline="\n") as handle:
        for session in sessions:
            public = {key: value for key, value in session.items() if not key.startswith("_")}
            handle.write(json.dumps(public, ensure_ascii=False) + "\n")
    print(f"wrote {len(sessions)} sessions to {out}")
    report(out)


if __name__ == "__main__":
    main(sys.argv)
