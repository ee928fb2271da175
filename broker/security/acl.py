"""The ACL file in Qpid's syntax, parsed and evaluated without I/O (issue 13, item 3).

Syntax (Qpid's ``--acl-file``; keywords are case-insensitive, ``#`` at the start of a line
or after white space starts a comment, a trailing ``\\`` continues a line)::

    group admins alice@QPID bob
    group ops admins carol              # groups may hold groups
    acl allow admins all all
    acl deny-log bob create queue name=tmp.* durable=true
    acl allow all publish exchange name=amq.topic routingkey=stock.#
    acl allow all consume queue name=work
    acl allow all access virtualhost
    acl deny-log all all                # the final default rule

A rule is ``acl PERMISSION SUBJECT ACTION OBJECT [property=value ...]``:

- PERMISSION: ``allow``, ``allow-log``, ``deny``, ``deny-log`` (the ``-log`` forms log
  each decision they make);
- SUBJECT: a user (``alice`` or ``alice@QPID``: the ``@QPID`` realm is ignored), a group,
  or ``all``;
- ACTION: ``access``, ``create``, ``delete``, ``bind``, ``unbind``, ``publish``,
  ``consume``, ``purge`` or ``all`` (Qpid's other actions are accepted and never asked);
- OBJECT: ``virtualhost``, ``queue``, ``exchange`` or ``all`` (``broker``, ``link``,
  ``method``, ``query`` accepted, never asked);
- properties: ``name``, ``durable``, ``autodelete``, ``exclusive``, ``type``,
  ``alternate``, ``queuename``, ``routingkey`` (and Qpid's others, accepted). A value
  ending in ``*`` matches by prefix; ``routingkey`` matches as a topic pattern (``*`` one
  word, ``#`` any number). A rule naming a property the request does not carry does not
  match it.

The first matching rule decides; when none matches, the request is denied (Qpid's
default). :meth:`Acl.decide` answers a :class:`Decision`; decisions are remembered per
request (bounded) since the rules never change: a reload makes a new :class:`Acl`.

What the broker asks (``broker.amqp.access`` maps the AMQP methods): ``access virtualhost
name=V`` on connection.open; ``create``/``access`` (passive) and ``delete`` of queues and
exchanges, ``bind``/``unbind exchange name=X queuename=Q routingkey=K``, ``publish
exchange name=X routingkey=K``, ``consume queue name=Q``, ``purge queue name=Q``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from broker.core.topic import topic_matches

__all__ = ["Acl", "AclError", "Decision", "Rule", "load_acl"]

PERMISSIONS = frozenset({"allow", "allow-log", "deny", "deny-log"})
ACTIONS = frozenset(
    [
        "access",
        "create",
        "delete",
        "bind",
        "unbind",
        "publish",
        "consume",
        "purge",
        "update",
        "move",
        "redirect",
        "reroute",
        "all",
    ]
)
OBJECTS = frozenset(
    ["virtualhost", "queue", "exchange", "broker", "link", "method", "query", "connection", "all"]
)
PROPERTIES = frozenset(
    [
        "name",
        "durable",
        "autodelete",
        "exclusive",
        "type",
        "alternate",
        "queuename",
        "routingkey",
        "host",
        "policytype",
        "maxqueuesize",
        "maxqueuecount",
        "schemapackage",
        "schemaclass",
        "passive",
        "filtertype",
        "maxfilesize",
        "maxpages",
    ]
)
REALM = "@QPID"
#: A comment: ``#`` at the start of a line or after white space (``routingkey=a.#`` is none).
_COMMENT = re.compile(r"(?:^|\s)#.*\Z", re.DOTALL)
_CACHE_LIMIT = 10_000


class AclError(ValueError):
    """A bad ACL file; the message names the file and line."""


def _user(name: str) -> str:
    return name[: -len(REALM)] if name.upper().endswith(REALM) else name


@dataclass(frozen=True, slots=True)
class Rule:
    line: int
    permission: str
    subject: str
    action: str
    object: str
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def allows(self) -> bool:
        return self.permission.startswith("allow")

    @property
    def logs(self) -> bool:
        return self.permission.endswith("-log")

    def matches(self, action: str, obj: str, props: Mapping[str, str]) -> bool:
        if self.action not in ("all", action) or self.object not in ("all", obj):
            return False
        for key, pattern in self.properties:
            value = props.get(key)
            if value is None or not _value_matches(key, pattern, value):
                return False
        return True

    def text(self) -> str:
        props = "".join(f" {k}={v}" for k, v in self.properties)
        return f"acl {self.permission} {self.subject} {self.action} {self.object}{props}"


def _value_matches(key: str, pattern: str, value: str) -> bool:
    if key == "routingkey":
        return topic_matches(pattern, value)
    if pattern.endswith("*"):
        return value.startswith(pattern[:-1])
    if pattern.lower() in ("true", "false"):
        return pattern.lower() == value.lower()
    return pattern == value


@dataclass(frozen=True, slots=True)
class Decision:
    allowed: bool
    logged: bool
    #: The deciding rule's line number and text; 0 and "default" when none matched.
    line: int
    rule: str


DEFAULT_DENY = Decision(False, True, 0, "default: deny (no rule matched)")


@dataclass
class Acl:
    """Parsed rules and groups. Treat as immutable: :meth:`decide` only fills its cache."""

    rules: tuple[Rule, ...]
    groups: Mapping[str, frozenset[str]]
    source: str = "<acl>"
    _cache: dict[tuple[str, str, str, tuple[tuple[str, str], ...]], Decision] = field(
        default_factory=dict, repr=False
    )

    @classmethod
    def parse(cls, text: str, source: str = "<acl>") -> Acl:
        """:raises AclError: naming ``source:line`` and what is wrong."""
        groups: dict[str, set[str]] = {}
        rules: list[Rule] = []
        for lineno, words in _logical_lines(text):
            where = f"{source}:{lineno}"
            keyword = words[0].lower()
            if keyword == "group":
                if len(words) < 3:
                    raise AclError(f"{where}: expected: group NAME MEMBER...")
                name = words[1]
                if name.lower() == "all":
                    raise AclError(f"{where}: 'all' cannot be a group name")
                groups.setdefault(name, set()).update(words[2:])
            elif keyword == "acl":
                rules.append(_rule(words, lineno, where, groups))
            else:
                raise AclError(f"{where}: expected 'acl' or 'group', got {words[0]!r}")
        return cls(tuple(rules), _flatten(groups), source)

    def members(self, group: str) -> frozenset[str]:
        return self.groups.get(group, frozenset())

    def _subject_matches(self, subject: str, user: str) -> bool:
        if subject == "all":
            return True
        if subject in self.groups:
            return user in self.groups[subject]
        return _user(subject) == user

    def decide(self, user: str, action: str, obj: str, props: Mapping[str, str]) -> Decision:
        """The first matching rule's decision for ``user`` (a login name), else deny."""
        user = _user(user)
        key = (user, action, obj, tuple(sorted(props.items())))
        found = self._cache.get(key)
        if found is not None:
            return found
        decision = DEFAULT_DENY
        for rule in self.rules:
            if self._subject_matches(rule.subject, user) and rule.matches(action, obj, props):
                decision = Decision(rule.allows, rule.logs, rule.line, rule.text())
                break
        if len(self._cache) >= _CACHE_LIMIT:
            self._cache.clear()
        self._cache[key] = decision
        return decision


def _logical_lines(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, words) per logical line: comments dropped, ``\\`` joined."""
    out: list[tuple[int, list[str]]] = []
    pending: list[str] = []
    start = 0
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = _COMMENT.sub("", raw).strip()
        if not pending and not line:
            continue
        if not pending:
            start = lineno
        continued = line.endswith("\\")
        pending.extend((line[:-1] if continued else line).split())
        if not continued:
            if pending:
                out.append((start, pending))
            pending = []
    if pending:
        out.append((start, pending))
    return out


def _rule(words: list[str], lineno: int, where: str, groups: Mapping[str, set[str]]) -> Rule:
    if len(words) < 3:
        raise AclError(f"{where}: expected: acl PERMISSION SUBJECT [ACTION [OBJECT [props]]]")
    permission = words[1].lower()
    if permission not in PERMISSIONS:
        raise AclError(
            f"{where}: unknown permission {words[1]!r} (allow, allow-log, deny, deny-log)"
        )
    subject = "all" if words[2].lower() == "all" else words[2]
    action = words[3].lower() if len(words) > 3 else "all"
    if action not in ACTIONS:
        raise AclError(f"{where}: unknown action {words[3]!r}")
    obj = words[4].lower() if len(words) > 4 else "all"
    if obj not in OBJECTS:
        raise AclError(f"{where}: unknown object {words[4]!r}")
    props: list[tuple[str, str]] = []
    for word in words[5:]:
        key, eq, value = word.partition("=")
        key = key.lower()
        if not eq or not value:
            raise AclError(f"{where}: expected property=value, got {word!r}")
        if key not in PROPERTIES:
            raise AclError(f"{where}: unknown property {key!r}")
        props.append((key, value))
    return Rule(lineno, permission, subject, action, obj, tuple(props))


def _flatten(groups: Mapping[str, set[str]]) -> dict[str, frozenset[str]]:
    """Each group's users, nested groups expanded (a cycle is expanded once)."""
    flat: dict[str, frozenset[str]] = {}
    for name in groups:
        users: set[str] = set()
        seen = {name}
        stack = list(groups[name])
        while stack:
            member = stack.pop()
            if member in groups:
                if member not in seen:
                    seen.add(member)
                    stack.extend(groups[member])
            else:
                users.add(_user(member))
        flat[name] = frozenset(users)
    return flat


def load_acl(path: str) -> Acl:
    """Read an ACL file. :raises AclError: unreadable, or a bad line (naming it)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = getattr(exc, "strerror", None) or type(exc).__name__
        raise AclError(f"cannot read ACL file {path!r}: {reason}") from None
    return Acl.parse(text, source=path)
