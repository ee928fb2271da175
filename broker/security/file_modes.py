"""Who else may change or read the broker's security files (the users file, the ACL).

:Status: Beta

A users file or ACL that another local account may write lets that account make itself an
administrator: the broker refuses it (:class:`FileModeError`, a ValueError: one line naming
the file, exit 2 at start; at a reload the running users or ACL stay). One that others may
read gives away the users' password hashes (or the ACL's rules): the broker starts and
warns, once (the caller logs :func:`readable_by_others`'s text as
``security_file_readable``). ``qpid-ha users`` writes the file with mode 0600.

"Others" are the accounts that are neither the file's owner nor in its group (the ``o``
bits of its mode, as ``chmod o-rw`` clears them); the group is the administrator's choice
(``qpidd`` reading a file ``root`` owns). A symbolic link is judged by the file it names.
"""

from __future__ import annotations

import os
import stat

__all__ = ["FileModeError", "check_not_writable_by_others", "readable_by_others"]


class FileModeError(ValueError):
    """A security file that other accounts may write (the message names it)."""


def check_not_writable_by_others(path: str, what: str) -> os.stat_result | None:
    """:raises FileModeError: ``path`` (a ``what``: "users file", "ACL file") is writable
    by others. Returns its stat, or None when it cannot be read (its reader says why)."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    mode = stat.S_IMODE(st.st_mode)
    if mode & stat.S_IWOTH:
        raise FileModeError(
            f"{what} {path!r} is writable by others (mode {mode:04o}): refused, any local"
            f" account could give itself every right; chmod o-w {path}"
        )
    return st


def readable_by_others(path: str, what: str) -> str | None:
    """Why ``path`` deserves a warning (others may read it), or None.

    :raises FileModeError: as :func:`check_not_writable_by_others`.
    """
    st = check_not_writable_by_others(path, what)
    if st is None or not stat.S_IMODE(st.st_mode) & stat.S_IROTH:
        return None
    return (
        f"{what} {path!r} is readable by others (mode {stat.S_IMODE(st.st_mode):04o}):"
        f" chmod o-r {path}"
    )
