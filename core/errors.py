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


def printable(s) -> str:
    """s with every non-printable character (C0/C1 controls, DEL, line and paragraph
    separators, format characters such as bidi overrides, unassigned code points)
    escaped as \\xNN, \\uNNNN or \\UNNNNNNNN; bytes are decoded as UTF-8 first.  For
    anything a profile or a file name puts on a terminal."""
    if isinstance(s, bytes):
        s = s.decode("utf-8", "backslashreplace")
    s = str(s)
    if s.isprintable():
        return s
    out = []
    for ch in s:
        if ch.isprintable():
            out.append(ch)
        else:
            n = ord(ch)
            out.append(f"\\x{n:02x}" if n < 0x100 else
                       f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}")
    return "".join(out)
