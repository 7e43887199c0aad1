"""The errors a user sees as one line: bad input, and training that cannot
go on."""

import contextlib
import os
import re
import signal
import sys
import threading

from absl import flags


class UsageError(ValueError):
    """Bad input from the user; the entry points print it as one line."""


class ArgumentError(UsageError):
    """A bad argument of a library function, named as Python names it:
    ``path='x.onnx': no such file``. The command line names the flag the
    value came from instead (:meth:`for_flags`)."""

    def __init__(self, argument, value, problem):
        self.argument, self.value, self.problem = argument, value, problem
        super().__init__(f"{argument}={value!r}: {problem}")

    def for_flags(self, flag_names):
        """The message with the argument as the flag ``flag_names`` maps
        it to (``{"path": "--model"}``): ``--model=x.onnx: no such
        file``; as it is where the argument has no flag."""
        flag = flag_names.get(self.argument)
        if flag is None:
            return str(self)
        value = self.value
        if value is None:
            return f"{flag} is not set: {self.problem}"
        if isinstance(value, tuple):
            if self.argument != "image_shape":
                # values of several flags (re-ranking's k1, k2, lambda):
                # the problem names each
                return f"{flag}: {self.problem}"
            value = ",".join(str(v) for v in value[:2])  # as the flag takes it
        elif isinstance(value, list):  # a comma-separated flag
            value = ",".join(str(v) for v in value)
        return f"{flag}={value}: {self.problem}"


class TrainingError(RuntimeError):
    """Training cannot go on (non-finite loss, too many unreadable images,
    a checkpoint that cannot be saved); printed as one line."""


def first_line(error):
    """The first line of an exception's message, without TensorFlow's
    ``{{function_node ...}}`` prefix and ``[Op:...]`` suffix."""
    text = (getattr(error, "message", None) or str(error)).strip()
    text = text.splitlines()[0] if text else type(error).__name__
    return re.sub(r"^\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]$", "",
                  text)


# what a command says, and its exit status, when Ctrl-C stops it: every
# output is renamed into place whole, so nothing half-written is left
INTERRUPTED = ("error: interrupted (Ctrl-C) before finishing; no output "
               "was left half-written")
INTERRUPTED_STATUS = 128 + 2  # SIGINT's number


def report_errors(argv, run, flag_names):
    """Run a command's ``run()`` (which returns its exit status) after
    absl parsed its flags (``argv``: what is left, the program's name);
    its errors become one line on stderr and a status: 2 for bad input
    (an ArgumentError named by the flag ``flag_names`` maps it to), 1 for
    training that cannot go on, 130 for Ctrl-C."""
    if len(argv) > 1:
        print(f"error: unexpected arguments: {' '.join(argv[1:])}; flags "
              "are written --name=value", file=sys.stderr)
        return 2
    with _ctrl_c_remembered() as interrupted:
        try:
            status = run()
            if not interrupted:
                return status
            # swallowed where it arrived (a finaliser)
            reported = INTERRUPTED, INTERRUPTED_STATUS
        except (Exception, KeyboardInterrupt) as error:
            reported = _one_line(error, interrupted, flag_names)
            if reported is None:
                raise
    print(reported[0], file=sys.stderr)  # stderr as it was before Ctrl-C
    return reported[1]


def _one_line(error, interrupted, flag_names):
    """``(line, exit status)`` of a command's error, None for any other.

    Ctrl-C is Ctrl-C whatever the code it interrupted turned it into
    (TensorFlow's autograph makes it a TypeError while it traces a
    function)."""
    if interrupted or isinstance(error, KeyboardInterrupt):
        return INTERRUPTED, INTERRUPTED_STATUS
    if isinstance(error, ArgumentError):
        return f"error: {error.for_flags(flag_names)}", 2
    if isinstance(error, UsageError):
        return f"error: {error}", 2
    if isinstance(error, TrainingError):
        return f"error: {error}", 1
    return None


@contextlib.contextmanager
def _ctrl_c_remembered():
    """Yield a list that gets the signal's number when Ctrl-C (SIGINT)
    arrives in the block; it still raises KeyboardInterrupt as Python's
    own handler does (where a finaliser swallows it, silently), and from
    then until the block ends, what is written to ``sys.stderr`` is
    dropped: the command is ending, and a library's C code that the
    KeyboardInterrupt reached inside an import prints its own traceback
    (TensorFlow's ``nest``: "SystemError: <built-in function __import__>
    returned a result with an exception set"). Where SIGINT is ignored or
    handled otherwise, or off the main thread, nothing changes."""
    received = []
    stderr = sys.stderr

    def remember(signum, frame):
        received.append(signum)
        sys.stderr = _Dropped(stderr)
        raise KeyboardInterrupt

    main = threading.current_thread() is threading.main_thread()
    if not main or signal.getsignal(signal.SIGINT) not in (
            signal.default_int_handler, _interrupted_while_starting):
        yield received
        return
    def unraisable(report):
        # a KeyboardInterrupt raised in a finaliser is lost, and Python
        # prints its traceback; it is remembered above, and said as one
        # line when the command ends
        if not isinstance(report.exc_value, KeyboardInterrupt):
            previous(report)

    previous = sys.unraisablehook
    signal.signal(signal.SIGINT, remember)
    sys.unraisablehook = unraisable
    try:
        yield received
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.unraisablehook = previous
        if received:
            sys.stderr = stderr


class _Dropped:
    """A text stream that drops what is written to it; anything else is
    the wrapped stream's."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        return len(text)

    def flush(self):
        pass

    def __getattr__(self, name):
        return getattr(self._stream, name)


def quiet_ctrl_c_while_starting():
    """A command's first statement (before its imports, under ``if
    __name__ == "__main__"``): Ctrl-C while TensorFlow and the rest load,
    or while the flags are parsed, ends the program with the one line and
    status 130 instead of an import's traceback, until
    :func:`report_errors` takes over. Where SIGINT is ignored or handled
    otherwise, nothing changes."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted_while_starting)


def _interrupted_while_starting(signum, frame):
    print(INTERRUPTED, file=sys.stderr, flush=True)
    os._exit(INTERRUPTED_STATUS)  # nothing is written yet


def parse_flags(argv):
    """absl's flag parser for ``app.run``: a bad flag (unknown, out of its
    choices, missing) is one line on stderr and exit status 2."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print("error: " + "; ".join(str(e).splitlines()), file=sys.stderr)
        sys.exit(2)
