"""The connection class of AMQP 0-9-1 on a connection: its handshake and its close.

Contract: :class:`ConnectionMethods` (a part of :class:`~broker.amqp.connection.Connection`)
sends connection.start, takes start-ok (the login: at once, or a password hash the shell
checks off the loop while the connection waits in ``AWAIT_LOGIN``), tune-ok and open (the
virtual host, the admission policy, connection.open-ok's ``known-hosts``), and answers
connection.close, update-secret and the blocked/unblocked notices. What is offered and
negotiated is decided in :mod:`broker.amqp.handshake`; a method out of its state is 505.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any, cast

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp.context import BrokerContext
from broker.amqp.handshake import (
    ENCRYPTION_REQUIRED,
    AdvertisesKnownHosts,
    OpenOkWithHosts,
    channel_max_offer,
    client_description,
    login_refused,
    negotiate_tune,
    open_vhost,
    start_method,
)
from broker.amqp.state import ConnectionState
from broker.core.errors import AmqpError, ReplyCode
from broker.core.vhost import VirtualHost
from broker.security.sasl import AuthenticationError, PasswordCheck

if TYPE_CHECKING:
    from broker.amqp.connection import Connection

S = ConnectionState


class ConnectionMethods:
    """The connection class; see the module docstring."""

    # Set by Connection.__init__ (broker/amqp/connection.py).
    ctx: BrokerContext
    state: ConnectionState
    name: str
    peer: str
    peer_host: str | None
    tls_identity: str | None
    encrypted: bool
    client_properties: dict[str, Any]
    login_check: PasswordCheck | None
    user: str | None
    vhost: VirtualHost
    frame_max: int
    channel_max: int
    heartbeat: int
    close_reason: str | None
    _admitted: bool

    if TYPE_CHECKING:  # provided by Connection

        @abstractmethod
        def send_method(self, channel: int, method: Method) -> None: ...

        @abstractmethod
        def _set_state(self, new: ConnectionState) -> None: ...

        @abstractmethod
        def _cleanup(self) -> None: ...

        @abstractmethod
        def _closed(self) -> None: ...

        @abstractmethod
        def _closed_by_client(self) -> None: ...

    def _send_start(self) -> None:
        self._set_state(S.AWAIT_START_OK)
        settings = self.ctx.settings
        self.send_method(
            0,
            start_method(
                settings,
                self.ctx.server_properties() if self.ctx.server_properties else {},
                self.ctx.authenticator.mechanisms(self.tls_identity),
            ),
        )

    def _unexpected(self, method: Method) -> AmqpError:
        return AmqpError(
            ReplyCode.UNEXPECTED_FRAME,
            f"{method.name} not expected in state {self.state.value}",
            method.index >> 16,
            method.index & 0xFFFF,
        )

    def _connection_method(self, method: Method) -> None:
        state = self.state
        if state is S.CLOSING:
            if isinstance(method, commands.Connection.CloseOk | commands.Connection.Close):
                if isinstance(method, commands.Connection.Close):
                    self.send_method(0, commands.Connection.CloseOk())
                self._closed()
            return
        if isinstance(method, commands.Connection.StartOk):
            if state is not S.AWAIT_START_OK:
                raise self._unexpected(method)
            self._start_ok(method)
        elif isinstance(method, commands.Connection.TuneOk):
            if state is not S.AWAIT_TUNE_OK:
                raise self._unexpected(method)
            self._tune_ok(method)
        elif isinstance(method, commands.Connection.Open):
            if state is not S.AWAIT_OPEN:
                raise self._unexpected(method)
            self._open(method)
        elif isinstance(method, commands.Connection.Close):
            self.close_reason = f"client closed: {method.reply_code} {method.reply_text}"
            self._cleanup()
            self.send_method(0, commands.Connection.CloseOk())
            self._closed_by_client()
        elif isinstance(method, commands.Connection.UpdateSecret):
            if state is not S.OPEN:
                raise self._unexpected(method)
            # A login's password does not expire: as RabbitMQ's internal user database,
            # take the new secret (the token refresh of other back-ends) and carry on.
            self.send_method(0, commands.Connection.UpdateSecretOk())
        elif isinstance(method, commands.Connection.Blocked | commands.Connection.Unblocked):
            return  # advisory notices; the broker does not act on them
        else:
            raise self._unexpected(method)

    def _start_ok(self, method: commands.Connection.StartOk) -> None:
        self.client_properties = dict(method.client_properties or {})
        response = method.response
        raw = response.encode("utf-8") if isinstance(response, str) else bytes(response or b"")
        mechanism = str(method.mechanism or "")
        if self.ctx.require_encryption and not self.encrypted:
            self.ctx.log.warning(
                "connection_refused_unencrypted", connection=self.name, peer=self.peer
            )
            raise AmqpError(ReplyCode.NOT_ALLOWED, ENCRYPTION_REQUIRED, 10, 11)
        try:
            outcome = self.ctx.authenticator.begin(
                mechanism, raw, self.peer_host, self.tls_identity
            )
        except AuthenticationError as exc:
            raise self._login_refused(mechanism, exc) from exc
        if isinstance(outcome, PasswordCheck):
            self.login_check = outcome  # the shell runs the hash in a thread
            self._set_state(S.AWAIT_LOGIN)
            return
        self._logged_in(outcome)

    def _finish_login(self, check: PasswordCheck, matched: bool) -> str:
        try:
            return self.ctx.authenticator.finish(check, matched)
        except AuthenticationError as exc:
            raise self._login_refused(check.mechanism, exc) from exc

    def _login_refused(self, mechanism: str, exc: AuthenticationError) -> AmqpError:
        self.ctx.log.warning(
            "authentication_failed", connection=self.name, mechanism=mechanism, reason=str(exc)
        )
        return login_refused(mechanism)

    def _logged_in(self, user: str) -> None:
        self.user = user
        self._set_state(S.AWAIT_TUNE_OK)
        settings = self.ctx.settings
        self.send_method(
            0,
            commands.Connection.Tune(
                channel_max=channel_max_offer(settings, self.client_properties),
                frame_max=settings.frame_max,
                heartbeat=settings.heartbeat,
            ),
        )

    def _tune_ok(self, method: commands.Connection.TuneOk) -> None:
        settings = self.ctx.settings
        offered = channel_max_offer(settings, self.client_properties)
        self.frame_max, self.channel_max, self.heartbeat = negotiate_tune(settings, method, offered)
        self._set_state(S.AWAIT_OPEN)

    def _open(self, method: commands.Connection.Open) -> None:
        ctx = self.ctx
        found = open_vhost(ctx, self.user, self.name, method.virtual_host or "/")
        if ctx.admission is not None:
            refusal = ctx.admission.admit(cast("Connection", self))
            if refusal is not None:
                ctx.connections_refused_total += 1
                raise refusal
            self._admitted = True
        self.vhost = found
        self._set_state(S.OPEN)
        ctx.connections_opened_total += 1
        known_hosts = ""
        if isinstance(ctx.admission, AdvertisesKnownHosts):
            known_hosts = ctx.admission.known_hosts()
        self.send_method(0, OpenOkWithHosts(known_hosts=known_hosts))
        ctx.log.info(
            "connection_opened",
            connection=self.name,
            peer=self.peer,
            user=self.user,
            vhost=found.name,
            client=client_description(self.client_properties),
            heartbeat=self.heartbeat,
            frame_max=self.frame_max,
        )
