"""The broker's security settings put together, and their reload (SIGHUP, ``qpid-ha acl
reload``).

:class:`BrokerSecurity` reads ``--acl-file`` at start (a bad file stops the start, exit 2,
naming the line) and installs the ACL on the connections' context. :meth:`reload` reads
the file again: a good file replaces the ACL at once for every later request, a bad one
leaves the running ACL in place and says why (``acl_reload_failed``). The caller decides
when: SIGHUP (:mod:`broker.main`) or ``POST /api/acl/reload``.

THREAD UNSAFE: the broker's event loop calls it.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

from broker.amqp.access import AccessControl
from broker.amqp.context import BrokerContext
from broker.security.acl import Acl, AclError, load_acl

__all__ = ["BrokerSecurity", "ReloadError"]


class ReloadError(Exception):
    """A reload was refused: the running settings stay (the message says why)."""


class BrokerSecurity:
    def __init__(self, acl_file: str | None, context: BrokerContext, log: Any) -> None:
        self.acl_file = acl_file
        self.context = context
        self.log = log
        self.loaded_at: float | None = None
        if acl_file:
            acl = load_acl(acl_file)  # AclError (a ValueError): bad configuration
            context.acl = AccessControl(acl, context.log)
            self.loaded_at = time.time()

    @property
    def acl(self) -> Acl | None:
        return None if self.context.acl is None else self.context.acl.acl

    def status(self) -> dict[str, Any]:
        acl = self.acl
        return {
            "acl_file": self.acl_file,
            "rules": None if acl is None else len(acl.rules),
            "groups": None if acl is None else sorted(acl.groups),
            "loaded_at": self.loaded_at,
        }

    def reload(self, reason: str) -> dict[str, Any]:
        """Read the ACL file again. :raises ReloadError: no ACL file, or a bad one."""
        if not self.acl_file or self.context.acl is None:
            raise ReloadError("no ACL file is configured (--acl-file)")
        try:
            acl = load_acl(self.acl_file)
        except AclError as exc:
            self.log.warning("acl_reload_failed", file=self.acl_file, reason=str(exc), by=reason)
            raise ReloadError(f"{exc} (the running ACL stays)") from None
        self.context.acl.replace(acl)
        self.loaded_at = time.time()
        self.log.info("acl_reloaded", file=self.acl_file, rules=len(acl.rules), by=reason)
        return self.status()

    def on_sighup(self) -> None:
        """SIGHUP: reload what has a file; failures are logged, the broker carries on."""
        if self.acl_file:
            with contextlib.suppress(ReloadError):  # logged by reload: the running ACL stays
                self.reload("SIGHUP")
