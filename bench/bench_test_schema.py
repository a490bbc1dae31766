"""What a PostgreSQL test's schema costs: made empty and migrated by its first open (as before
suitetime3) against replayed from a migrated schema's ``pg_dump`` script (tests/conftest.py).

``REM_TEST_POSTGRES_URL=postgresql://… python bench/bench_test_schema.py [--pairs N]`` — N rounds
(10), the two ways in turn; each figure is the wall time of making the schema, opening it (migrating, or
finding it migrated) and closing it; the drop is left out. Prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from store.backend import open_database_at  # noqa: E402
from store.postgres import close_pools  # noqa: E402
from tests.conftest import MIGRATED_SCHEMA_PLACEHOLDER, replay_migrated_schema, schema_script, schema_url  # noqa: E402

def opened(server: str, schema: str) -> None:
    open_database_at(path=Path(os.devnull), url=schema_url(server, schema)).close()


def main(argv: list[str] | None = None) -> dict[str, float]:
    """Run the benchmark, print the medians and return them (seconds)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=10)
    args = parser.parse_args(argv)
    server = os.environ["REM_TEST_POSTGRES_URL"]
    template = f"bench_template_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {template}")  # type: ignore[arg-type]  # a name made here
    opened(server, template)
    script = schema_script(server, template).replace(template, MIGRATED_SCHEMA_PLACEHOLDER)
    migrated: list[float] = []
    replayed: list[float] = []
    schemas = [template]
    try:
        for _ in range(args.pairs):
            for times, replay in ((migrated, False), (replayed, True)):
                schema = f"bench_{uuid.uuid4().hex[:12]}"
                schemas.append(schema)
                started = time.perf_counter()
                with psycopg.connect(server, autocommit=True) as conn:
                    if replay:
                        replay_migrated_schema(conn, script, schema)
                    else:
                        conn.execute(f"CREATE SCHEMA {schema}")  # type: ignore[arg-type]
                opened(server, schema)
                times.append(time.perf_counter() - started)
                close_pools()
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            for schema in schemas:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")  # type: ignore[arg-type]
    before, after = statistics.median(migrated), statistics.median(replayed)
    print(f"empty schema, migrated by its first open: median {before:.3f} s")
    print(f"replayed from the migrated schema's script: median {after:.3f} s ({after / before:.2f}x)")
    return {"migrated_s": before, "replayed_s": after}


if __name__ == "__main__":
    main()
