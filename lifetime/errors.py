"""The one base class of errors a user can act on.

A `LifetimeError` is a problem with the user's input or environment: a corrupt or
missing file, a bad option, an unwritable directory, a component not built.  Its
message names the file or option and says what is wrong.  The `lifetime` command
catches it once (lifetime/cli.py) and prints one line; every other exception is a
bug and keeps its traceback.
"""


class LifetimeError(Exception):
    """A user-facing error; the message names the file or option and the problem."""


class UsageError(LifetimeError, ValueError):
    """A bad option value or combination of options."""


class InputError(LifetimeError):
    """Input files that cannot be used at all (none matched, none readable, none with
    data).  One bad file among good ones is counted and skipped, not raised."""


def printable(text: str) -> str:
    """Text for a terminal: control characters (and lone surrogates from undecodable
    file names) escaped, so a program name or path from a profile cannot drive it."""
    return "".join(c if c.isprintable() or c == " " else c.encode("unicode_escape",
                   "backslashreplace").decode("ascii") for c in text)
