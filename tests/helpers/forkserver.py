"""Start the project's programs for the tests without paying TensorFlow's
import each time: ``python -m tests.helpers.forkserver`` imports
TensorFlow and Keras once, then forks one child per request and runs the
program in it as ``python SCRIPT ...`` or ``python -m MODULE ...`` would.

Each child is a real process of its own: its own pid, exit status,
signals, ``sys.argv``, working directory, environment and output files.
What it shares with the server is only the modules imported before the
fork, which no program changes before it runs (TensorFlow creates its
runtime on the first operation, in the child).

Requests and answers are JSON lines on stdin and stdout:
``{"id", "argv", "cwd", "env", "stdout", "stderr"}`` is answered by
``{"id", "pid"}`` once the child runs and ``{"id", "status"}`` once it has
ended (the status as ``subprocess`` gives it: the exit code, or minus the
signal that ended it).
"""

import importlib
import json
import os
import select
import sys

# imported once, before the forks
PRELOADED = ("numpy", "tensorflow", "keras")


def _exit_code(error):
    """The status ``python`` exits with on ``SystemExit(error.code)``."""
    if error.code is None:
        return 0
    if isinstance(error.code, int):
        return error.code
    print(error.code, file=sys.stderr)
    return 1


def _run_child(request, server_fds):
    """In the child: the program of ``request``, then exit as Python
    would."""
    import atexit
    import runpy
    import signal
    import threading
    import traceback

    for fd in server_fds:
        os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(handle, fd)
        os.close(handle)
    sys.stdin = open(0, "r", closefd=False)
    sys.stdout = open(1, "w", closefd=False)  # block-buffered, as to a file
    sys.stderr = open(2, "w", buffering=1, errors="backslashreplace",
                      closefd=False)
    argv = request["argv"]
    code = 0
    try:
        if argv[0] == "-m":
            sys.argv = [argv[1], *argv[2:]]  # runpy sets argv[0]
            sys.path[0] = request["cwd"]
            runpy.run_module(argv[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = list(argv)
            sys.path[0] = os.path.dirname(os.path.abspath(argv[0]))
            runpy.run_path(argv[0], run_name="__main__")
    except SystemExit as error:
        code = _exit_code(error)
    except KeyboardInterrupt:
        traceback.print_exc()
        code = -signal.SIGINT
    except BaseException:  # as the interpreter prints it
        traceback.print_exc()
        code = 1
    try:  # what the interpreter does on its way out
        threading._shutdown()
        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
    finally:
        if code == -signal.SIGINT:  # killed by SIGINT, as Python ends
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        os._exit(code & 0xFF)


def _status(wait_status):
    if os.WIFSIGNALED(wait_status):
        return -os.WTERMSIG(wait_status)
    return os.WEXITSTATUS(wait_status)


def serve():
    for name in PRELOADED:
        importlib.import_module(name)
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    requests = os.dup(0)
    running = {}  # pid: request id
    pending = ""
    while True:
        while running:  # the children that ended
            pid, wait_status = os.waitpid(-1, os.WNOHANG)
            if pid == 0:
                break
            answers.write(json.dumps({"id": running.pop(pid),
                                      "status": _status(wait_status)})
                          + "\n")
        ready, _, _ = select.select([requests], [], [], 0.02)
        if not ready:
            continue
        chunk = os.read(requests, 65536).decode()
        if not chunk:  # the tests ended: the children go on to their end
            return
        pending += chunk
        while "\n" in pending:
            line, pending = pending.split("\n", 1)
            request = json.loads(line)
            answers.flush()
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                try:
                    _run_child(request, (answers.fileno(), requests))
                finally:
                    os._exit(70)
            running[pid] = request["id"]
            answers.write(json.dumps({"id": request["id"], "pid": pid})
                          + "\n")


if __name__ == "__main__":
    serve()
