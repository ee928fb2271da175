"""An in-memory model of ZooKeeper's semantics, for the promotion's model check only.

A test double of what the agent's ZooKeeper code relies on, never of what users run (the
real behaviour is tested against a real server, ``tests/zookeeper.py``):

- versioned znodes (``setData``/``delete`` at a version, ``create`` refusing an existing
  one, parents needed), ephemeral znodes owned by a session;
- multi-ops (``transaction()``): checked and applied atomically, or nothing applied, with
  kazoo's result list (the failing operation's error, ``RolledBackError`` for the others);
- sessions: :meth:`ModelZooKeeper.expire` deletes the session's ephemerals and fails its
  client's later calls (``SessionExpiredError``);
- a connection lost after a commit: :attr:`ModelZooKeeper.lose_next` makes the next write
  (or multi-op) apply and then raise ``ConnectionLoss``, so the writer does not know; a
  retry through :meth:`ModelClient.retry` sends the same call again, as kazoo's does;
- kazoo's ``Election`` recipe as a lock owned by a session (the lowest contender leads):
  :meth:`ModelZooKeeper.try_lock`.

Watches are not modelled: the model check drives each agent's steps itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    ConnectionLoss,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    SessionExpiredError,
)


@dataclass
class Stat:
    version: int
    ephemeralOwner: int  # kazoo's name


@dataclass
class Znode:
    data: bytes
    version: int = 0
    owner: int = 0  # the session of an ephemeral znode (0: persistent)


@dataclass
class ModelZooKeeper:
    """The server: znodes, live sessions, the election lock, and faults to inject."""

    nodes: dict[str, Znode] = field(default_factory=lambda: {"/": Znode(b"")})
    sessions: set[int] = field(default_factory=set)
    next_session: int = 0x100
    #: the next write's answer is lost after it was applied (once)
    lose_next: bool = False
    #: kazoo Election queue: sessions in the order they contended
    contenders: list[int] = field(default_factory=list)

    def connect(self) -> ModelClient:
        self.next_session += 1
        self.sessions.add(self.next_session)
        return ModelClient(self, self.next_session)

    def expire(self, session: int) -> None:
        """ZooKeeper expires ``session``: its ephemerals and its place in the election go."""
        self.sessions.discard(session)
        for path in [p for p, n in self.nodes.items() if n.owner == session]:
            del self.nodes[path]
        self.contenders = [s for s in self.contenders if s != session]

    # the election lock (kazoo's recipe: the first live contender holds it) ------------
    def try_lock(self, session: int) -> bool:
        if session not in self.contenders:
            self.contenders.append(session)
        return self.contenders[0] == session

    def unlock(self, session: int) -> None:
        self.contenders = [s for s in self.contenders if s != session]

    # the operations, applied -----------------------------------------------------------
    def _parent(self, path: str) -> str:
        return path.rsplit("/", 1)[0] or "/"

    def _check(self, path: str, version: int) -> None:
        node = self.nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        if version != -1 and node.version != version:
            raise BadVersionError(path)

    def _create(self, path: str, data: bytes, session: int, ephemeral: bool) -> None:
        if path in self.nodes:
            raise NodeExistsError(path)
        if self._parent(path) not in self.nodes:
            raise NoNodeError(self._parent(path))
        self.nodes[path] = Znode(data, 0, session if ephemeral else 0)

    def _delete(self, path: str, version: int) -> None:
        self._check(path, version)
        if any(self._parent(p) == path for p in self.nodes if p != path):
            raise NotEmptyError(path)
        del self.nodes[path]

    def _set(self, path: str, data: bytes, version: int) -> Stat:
        self._check(path, version)
        node = self.nodes[path]
        node.data, node.version = data, node.version + 1
        return Stat(node.version, node.owner)

    def _lost_after_commit(self) -> None:
        if self.lose_next:
            self.lose_next = False
            raise ConnectionLoss("the answer was lost after ZooKeeper applied the write")


class ModelTransaction:
    """kazoo's ``TransactionRequest`` over the model: all or nothing."""

    def __init__(self, client: ModelClient) -> None:
        self.client = client
        self.ops: list[tuple[str, tuple[Any, ...]]] = []

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", (path, version)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set", (path, value, version)))

    def create(self, path: str, value: bytes = b"", ephemeral: bool = False) -> None:
        self.ops.append(("create", (path, value, ephemeral)))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", (path, version)))

    def commit(self) -> list[Any]:
        server = self.client.live()
        saved = {p: Znode(n.data, n.version, n.owner) for p, n in server.nodes.items()}
        results: list[Any] = []
        for kind, args in self.ops:
            try:
                if kind == "check":
                    server._check(*args)
                    results.append(True)
                elif kind == "set":
                    results.append(server._set(*args))
                elif kind == "create":
                    path, value, ephemeral = args
                    server._create(path, value, self.client.session, ephemeral)
                    results.append(path)
                else:
                    server._delete(*args)
                    results.append(True)
            except (BadVersionError, NodeExistsError, NoNodeError, NotEmptyError) as exc:
                server.nodes = saved  # nothing applied
                failed = len(results)
                return [exc if i == failed else RolledBackError() for i in range(len(self.ops))]
        server._lost_after_commit()
        return results


class ModelClient:
    """A kazoo client of one session, over the model: the calls the agent's code makes."""

    def __init__(self, server: ModelZooKeeper, session: int) -> None:
        self.server = server
        self.session = session

    @property
    def client_id(self) -> tuple[int, bytes]:
        return (self.session, b"")

    def live(self) -> ModelZooKeeper:
        if self.session not in self.server.sessions:
            raise SessionExpiredError(f"session {self.session:#x} expired")
        return self.server

    def retry(self, func: Any, *args: Any, **kwargs: Any) -> Any:
        """kazoo's command retry: a call whose answer was lost is sent again."""
        for _ in range(3):
            try:
                return func(*args, **kwargs)
            except ConnectionLoss:
                continue
        return func(*args, **kwargs)

    def transaction(self) -> ModelTransaction:
        return ModelTransaction(self)

    def sync(self, path: str) -> str:
        self.live()
        return path

    def get(self, path: str, watch: Any = None) -> tuple[bytes, Stat]:
        node = self.live().nodes.get(path)
        if node is None:
            raise NoNodeError(path)
        return node.data, Stat(node.version, node.owner)

    def exists(self, path: str, watch: Any = None) -> Stat | None:
        node = self.live().nodes.get(path)
        return None if node is None else Stat(node.version, node.owner)

    def get_children(self, path: str) -> list[str]:
        server = self.live()
        if path not in server.nodes:
            raise NoNodeError(path)
        prefix = path.rstrip("/") + "/"
        names = [p[len(prefix) :] for p in server.nodes if p.startswith(prefix)]
        return sorted(name for name in names if "/" not in name)

    def ensure_path(self, path: str) -> None:
        server = self.live()
        parts = path.strip("/").split("/")
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            if sub not in server.nodes:
                server.nodes[sub] = Znode(b"")

    def create(
        self, path: str, value: bytes = b"", ephemeral: bool = False, makepath: bool = False
    ) -> str:
        server = self.live()
        if makepath:
            self.ensure_path(server._parent(path))
        server._create(path, value, self.session, ephemeral)
        server._lost_after_commit()
        return path

    def set(self, path: str, value: bytes, version: int = -1) -> Stat:
        stat = self.live()._set(path, value, version)
        self.server._lost_after_commit()
        return stat

    def delete(self, path: str, version: int = -1) -> None:
        self.live()._delete(path, version)
        self.server._lost_after_commit()
