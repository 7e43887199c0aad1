"""The error a user can cause and fix: bad flags, bad dataset layout."""


class UsageError(ValueError):
    """Bad input from the user; the entry points print it as one line."""
