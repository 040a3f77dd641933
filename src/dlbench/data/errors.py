"""The one error every data loader raises: a missing or malformed file, named, on one line."""

from __future__ import annotations


class DataError(ValueError):
    """A data set, directory or file that is missing or not in the expected format.

    The message is always one line (whitespace is collapsed) and names the path and what was
    expected, so the command line can print it as it is and exit 2.
    """

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(str(message).split()))
