"""The command server behind tests.conftest.run_cli: a ``python -m worker`` run forked from a process
that has already imported the worker (tests/fork_server.py's imports), so a test's command pays a
fork instead of an interpreter start and the imports (about 1 s of CPU each, hundreds of commands
a suite run).

A forked command is a process of its own, as ``subprocess.run`` gives: it runs ``worker/__main__.py``
as ``__main__`` (runpy, as ``-m`` does) with the caller's argv, environment, working directory and
``sys.path[0]``, on the caller's stdin and the caller's stdout/stderr files; it ends as the
interpreter ends (non-daemon threads joined, atexit handlers, the streams flushed; an uncaught
exception's traceback and status 1, SystemExit's status, an uncaught Ctrl-C as death by SIGINT).
What it skips is the start-up, so run_cli sends here only commands whose environment, apart from
``REM_*`` settings (read when a command loads its settings, never at import), is the server's own.

Protocol, over an AF_UNIX SOCK_SEQPACKET socket at argv[1], one connection a command: the client
sends ``{"argv": [...], "env": {...}, "cwd": "..."}`` with three descriptors (stdin, stdout,
stderr); the server answers ``{"pid": N}`` at once, then ``{"status": S}`` when the command ends
(its exit code, or minus the signal that killed it). The server says ``ready`` on stdout once it
listens and ends when its stdin closes (the test process is gone).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import runpy
import selectors
import signal
import socket
import sys
import threading
import traceback
from typing import Any, NoReturn

from tests.fork_server import check_no_threads

MAX_REQUEST = 1 << 20


def exit_status(exc: SystemExit) -> int:
    """The status the interpreter exits with for an uncaught ``SystemExit`` (a non-integer code is
    printed to stderr, status 1)."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def end_as_interpreter(status: int) -> NoReturn:
    """Exit as Python's own shutdown does: join the non-daemon threads, run the atexit handlers,
    flush stdout and stderr (a failed flush exits 120)."""
    threading._shutdown()  # type: ignore[attr-defined] - what Py_FinalizeEx calls first
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # noqa: BLE001 - as the interpreter: reported, status 120
            traceback.print_exc()
            status = 120
    os._exit(status & 0xFF)


def run_command(request: dict[str, Any], fds: list[int]) -> NoReturn:
    """In the forked child: become ``python -m worker ARGS`` and never return."""
    try:
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.environ.clear()
        os.environ.update(request["env"])
        os.chdir(request["cwd"])
        sys.path[0] = request["cwd"]  # as ``-m`` puts the working directory first
        sys.argv = ["-m", *request["argv"]]
    except BaseException:  # noqa: BLE001 - the child must never return into the server loop
        traceback.print_exc()
        os._exit(70)
    try:
        runpy.run_module("worker", run_name="__main__", alter_sys=True)
        status = 0
    except SystemExit as exc:
        status = exit_status(exc)
    except KeyboardInterrupt:
        traceback.print_exc()
        # As the interpreter ends on an uncaught Ctrl-C: killed by SIGINT.
        sys.stdout.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
        status = 130
    except BaseException:  # noqa: BLE001 - the interpreter's own report of an uncaught exception
        sys.excepthook(*sys.exc_info())
        status = 1
    end_as_interpreter(status)


def serve(path: str) -> None:
    """Accept commands on ``path`` until stdin closes."""
    check_no_threads()
    selector = selectors.DefaultSelector()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    listener.bind(path)
    listener.listen(64)
    selector.register(listener, selectors.EVENT_READ, "accept")
    selector.register(sys.stdin.fileno(), selectors.EVENT_READ, "stdin")
    print("ready", flush=True)
    while True:
        for key, _ in selector.select():
            if key.data == "stdin":
                if not os.read(sys.stdin.fileno(), 4096):
                    return
            elif key.data == "accept":
                conn, _ = listener.accept()
                message, fds, _, _ = socket.recv_fds(conn, MAX_REQUEST, 3)
                request = json.loads(message)
                pid = os.fork()
                if pid == 0:
                    selector.close()
                    listener.close()
                    conn.close()
                    run_command(request, fds)
                for fd in fds:
                    os.close(fd)
                conn.send(json.dumps({"pid": pid}).encode())
                selector.register(os.pidfd_open(pid), selectors.EVENT_READ, (pid, conn))
            else:
                pid, conn = key.data
                selector.unregister(key.fd)
                os.close(key.fd)
                _, status = os.waitpid(pid, 0)
                # A test that started a command and never waited for it has closed its end.
                with contextlib.suppress(OSError):
                    conn.send(json.dumps({"status": os.waitstatus_to_exitcode(status)}).encode())
                conn.close()


if __name__ == "__main__":
    serve(sys.argv[1])
