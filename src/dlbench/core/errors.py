"""Errors that mean the user asked for something wrong (exit 2), not that a measurement failed."""


class UsageError(Exception):
    """Bad input: the message is one line naming the problem."""
