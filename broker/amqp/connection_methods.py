"""The connection class of AMQP 0-9-1 on a connection: its handshake and its close.

Contract: :class:`ConnectionMethods` (owned by a :class:`~broker.amqp.connection.Connection`,
one per connection, built with a :class:`ConnectionMethodsHost`: what it reads of the
connection, the fields the handshake fills in, and its state moves) sends
connection.start, takes start-ok (the login: at once, or a password hash the shell
checks off the loop while the connection waits in ``AWAIT_LOGIN``; none for a client the
admission policy refuses before its login, which is offered an empty tune and refused at
open), tune-ok and open (the virtual host, the admission policy, connection.open-ok's
``known-hosts``), and answers
connection.close, update-secret and the blocked/unblocked notices. What is offered and
negotiated is decided in :mod:`broker.amqp.handshake`; a method out of its state is 505.

THREAD UNSAFE: the connection's event loop.
"""

from __future__ import annotations

from typing import Any, Protocol

from pamqp import commands
from pamqp.base import Frame as Method

from broker.amqp import framing
from broker.amqp.context import BrokerContext
from broker.amqp.handshake import (
    ENCRYPTION_REQUIRED,
    AdvertisesKnownHosts,
    OpenOkWithHosts,
    channel_max_offer,
    check_vhost_connections,
    client_description,
    login_refused,
    negotiate_tune,
    open_vhost,
    start_method,
    tune_before_refusal,
)
from broker.amqp.state import ConnectionState
from broker.core.errors import AmqpError, ReplyCode, RoutineRefusal
from broker.core.vhost import VirtualHost
from broker.security.sasl import AuthenticationError, PasswordCheck

S = ConnectionState


class ConnectionMethodsHost(Protocol):
    """What :class:`ConnectionMethods` need of their connection: who is at the other end,
    the fields the handshake fills in, sending a method, and the connection's state moves."""

    # Read: who connected, and how.
    @property
    def state(self) -> ConnectionState: ...

    @property
    def name(self) -> str: ...

    @property
    def peer(self) -> str: ...

    @property
    def peer_host(self) -> str | None: ...

    @property
    def tls_identity(self) -> str | None: ...

    @property
    def encrypted(self) -> bool: ...

    # Filled in by the handshake.
    client_properties: dict[str, Any]
    login_check: PasswordCheck | None
    user: str | None
    vhost: VirtualHost
    frame_max: int
    channel_max: int
    heartbeat: int
    close_reason: str | None
    admitted: bool
    should_close: bool

    def send_method(self, channel: int, method: Method) -> None: ...

    def write(self, data: bytes) -> None: ...

    def set_state(self, new: ConnectionState) -> None:
        """Move to ``new`` (checked against the transition table)."""
        ...

    def closed(self) -> None:
        """The close handshake finished: drop the socket."""
        ...

    def closed_by_client(self) -> None:
        """The client's connection.close came: release the channels and what the
        connection owns, then answer close-ok (perhaps at a later turn of the loop)."""
        ...


class ConnectionMethods:
    """The connection class; see the module docstring."""

    def __init__(self, host: ConnectionMethodsHost, ctx: BrokerContext) -> None:
        self.host = host
        self.ctx = ctx
        #: start-ok found the client refused before its login: no password was checked,
        #: the tune offered nothing, and connection.open refuses it (:meth:`_open`)
        self.refused_before_login = False

    def bad_protocol_header(self, header: bytes) -> None:
        # Spec 4.2.2: answer with the header we support and close.
        host = self.host
        self.ctx.protocol_errors_total += 1
        self.ctx.log.warning(
            "protocol_error",
            connection=host.name,
            reply_code=None,
            reason=f"bad protocol header {header[:8]!r}",
        )
        host.write(framing.PROTOCOL_HEADER)
        host.close_reason = "bad protocol header"
        host.should_close = True

    def send_start(self) -> None:
        host = self.host
        host.set_state(S.AWAIT_START_OK)
        settings = self.ctx.settings
        host.send_method(
            0,
            start_method(
                settings,
                self.ctx.server_properties() if self.ctx.server_properties else {},
                self.ctx.authenticator.mechanisms(host.tls_identity),
            ),
        )

    def _unexpected(self, method: Method) -> AmqpError:
        host = self.host
        return AmqpError(
            ReplyCode.UNEXPECTED_FRAME,
            f"{method.name} not expected in state {host.state.value}",
            method.index >> 16,
            method.index & 0xFFFF,
        )

    def method(self, method: Method) -> None:
        host = self.host
        state = host.state
        if state is S.CLOSING:
            if isinstance(method, commands.Connection.CloseOk | commands.Connection.Close):
                if isinstance(method, commands.Connection.Close):
                    host.send_method(0, commands.Connection.CloseOk())
                host.closed()
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
            host.close_reason = f"client closed: {method.reply_code} {method.reply_text}"
            host.closed_by_client()
        elif isinstance(method, commands.Connection.UpdateSecret):
            if state is not S.OPEN:
                raise self._unexpected(method)
            # A login's password does not expire: as RabbitMQ's internal user database,
            # take the new secret (the token refresh of other back-ends) and carry on.
            host.send_method(0, commands.Connection.UpdateSecretOk())
        elif isinstance(method, commands.Connection.Blocked | commands.Connection.Unblocked):
            return  # advisory notices; the broker does not act on them
        else:
            raise self._unexpected(method)

    def _refusal_without_login(self) -> AmqpError:
        """connection.open of a client whose login was skipped: the refusal as the
        admission words it now, before any virtual host or ACL check (a client not logged
        in learns nothing of those); if the broker began serving meanwhile, a refusal
        all the same (its password was never checked), which it meets by dialling again."""
        ctx = self.ctx
        ctx.connections_refused_total += 1
        admission = ctx.admission
        refusal = None
        if admission is not None:
            refusal = admission.refusal_before_login(self.host.client_properties)
        return refusal or RoutineRefusal(
            ReplyCode.NOT_ALLOWED,
            "HA broker began serving during this connection's handshake: connect again",
        )

    def _start_ok(self, method: commands.Connection.StartOk) -> None:
        host = self.host
        host.client_properties = dict(method.client_properties or {})
        response = method.response
        raw = response.encode("utf-8") if isinstance(response, str) else bytes(response or b"")
        mechanism = str(method.mechanism or "")
        if self.ctx.require_encryption and not host.encrypted:
            self.ctx.log.warning(
                "connection_refused_unencrypted", connection=host.name, peer=host.peer
            )
            raise AmqpError(ReplyCode.NOT_ALLOWED, ENCRYPTION_REQUIRED, 10, 11)
        admission = self.ctx.admission
        if admission is not None and admission.refusal_before_login(host.client_properties):
            # refused at open whatever the password: no hash spent on it (an HA backup
            # that every client of a fail-over dials)
            self.refused_before_login = True
            host.set_state(S.AWAIT_TUNE_OK)
            host.send_method(0, tune_before_refusal())
            return
        try:
            outcome = self.ctx.authenticator.begin(
                mechanism, raw, host.peer_host, host.tls_identity
            )
        except AuthenticationError as exc:
            raise self._login_refused(mechanism, exc) from exc
        if isinstance(outcome, PasswordCheck):
            host.login_check = outcome  # the shell runs the hash in a thread
            host.set_state(S.AWAIT_LOGIN)
            return
        self.logged_in(outcome)

    def finish_login(self, check: PasswordCheck, matched: bool) -> str:
        try:
            return self.ctx.authenticator.finish(check, matched)
        except AuthenticationError as exc:
            raise self._login_refused(check.mechanism, exc) from exc

    def _login_refused(self, mechanism: str, exc: AuthenticationError) -> AmqpError:
        host = self.host
        self.ctx.log.warning(
            "authentication_failed", connection=host.name, mechanism=mechanism, reason=str(exc)
        )
        return login_refused(mechanism)

    def logged_in(self, user: str) -> None:
        host = self.host
        host.user = user
        host.set_state(S.AWAIT_TUNE_OK)
        settings = self.ctx.settings
        host.send_method(
            0,
            commands.Connection.Tune(
                channel_max=channel_max_offer(settings, host.client_properties),
                frame_max=settings.frame_max,
                heartbeat=settings.heartbeat,
            ),
        )

    def _tune_ok(self, method: commands.Connection.TuneOk) -> None:
        host = self.host
        if self.refused_before_login:
            host.set_state(S.AWAIT_OPEN)  # nothing offered, nothing to check
            return
        settings = self.ctx.settings
        offered = channel_max_offer(settings, host.client_properties)
        host.frame_max, host.channel_max, host.heartbeat = negotiate_tune(settings, method, offered)
        host.set_state(S.AWAIT_OPEN)

    def _open(self, method: commands.Connection.Open) -> None:
        host = self.host
        ctx = self.ctx
        if self.refused_before_login:
            raise self._refusal_without_login()
        found = open_vhost(ctx, host.user, host.name, method.virtual_host or "/")
        if ctx.admission is not None:
            refusal = ctx.admission.admit(host)
            if refusal is not None:
                ctx.connections_refused_total += 1
                raise refusal
            host.admitted = True
        check_vhost_connections(ctx, host.client_properties, host.user, found)
        host.vhost = found
        host.set_state(S.OPEN)
        ctx.connections_opened_total += 1
        known_hosts = ""
        if isinstance(ctx.admission, AdvertisesKnownHosts):
            known_hosts = ctx.admission.known_hosts()
        host.send_method(0, OpenOkWithHosts(known_hosts=known_hosts))
        ctx.log.info(
            "connection_opened",
            connection=host.name,
            peer=host.peer,
            user=host.user,
            vhost=found.name,
            client=client_description(host.client_properties),
            heartbeat=host.heartbeat,
            frame_max=host.frame_max,
        )
