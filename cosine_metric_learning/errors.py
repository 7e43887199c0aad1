"""The errors a user sees as one line: bad input, and training that cannot
go on."""

import re
import sys

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
        if isinstance(value, tuple):  # an image shape, as the flag takes it
            value = ",".join(str(v) for v in value[:2])
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


def parse_flags(argv):
    """absl's flag parser for ``app.run``: a bad flag (unknown, out of its
    choices, missing) is one line on stderr and exit status 2."""
    try:
        return flags.FLAGS(argv)
    except flags.Error as e:
        print("error: " + "; ".join(str(e).splitlines()), file=sys.stderr)
        sys.exit(2)
