"""A fork server for kill tests: imports the worker once, then forks one ``rem-cycle`` process per
request, so a trial pays for a fork instead of an interpreter start and the chromadb import.

Protocol (one JSON object per line on stdin, one answer per line on stdout):
``{"run": [ARGS...], "env": {...}}`` → ``{"pid": N}`` (the child runs ``worker.cli.main(ARGS)``
with ``env`` added to its environment, output discarded); ``{"wait": N}`` → ``{"status": S}``
(the child's exit code, or minus the signal that killed it).

Safe to fork: the imports start no thread (checked at start-up), and every store, client and event
loop is created in the child.
"""

from __future__ import annotations

import json
import os
import sys
import threading

import chromadb  # noqa: F401 - the expensive imports, paid once
import chromadb.api.rust  # noqa: F401
# A cycle's finalize refreshes communities, and detection imports networkx where it runs (commands
# do not load it at start, tests/test_cli_start.py): about 0.2 s of CPU in every forked cycle.
import networkx  # noqa: F401

import pipelines.drain  # noqa: F401
import pipelines.extract.heuristic  # noqa: F401
import pipelines.extract.workflow  # noqa: F401
import worker.cli
import worker.daemon  # noqa: F401


def _child(args: list[str], env: dict[str, str]) -> None:
    os.environ.update(env)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    try:
        code = worker.cli.main(args)
    except BaseException:  # noqa: BLE001 - a child must never return into the server loop
        code = 70
    os._exit(code)


def check_no_threads() -> None:
    """Refuse to serve if the imports started a thread: a fork copies only the forking thread, so
    a lock another thread held would stay locked in every child."""
    if threading.active_count() != 1:
        raise SystemExit("fork server: imports started threads; forking would be unsafe")


def main() -> None:
    check_no_threads()
    for line in sys.stdin:
        request = json.loads(line)
        if "run" in request:
            pid = os.fork()
            if pid == 0:
                _child(request["run"], request.get("env", {}))
            answer = {"pid": pid}
        else:
            _, status = os.waitpid(request["wait"], 0)
            answer = {"status": os.waitstatus_to_exitcode(status)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
