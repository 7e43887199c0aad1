"""The error a user can cause and fix: bad flags, bad dataset layout."""


class UsageError(ValueError):
    """Bad input from the user; the entry points print it as one line."""


def first_line(error):
    """The first line of an exception's message (TF errors run long)."""
    text = (getattr(error, "message", None) or str(error)).strip()
    return text.splitlines()[0] if text else type(error).__name__
