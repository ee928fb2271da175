"""SaslLayer: the protocol headers and the SASL exchange of one AMQP 1.0 connection, before
``open`` (part 5, section 5.3).

The :class:`~broker.amqp10.connection.Connection` owns one and hands it every protocol
header it reads and every frame while it waits for ``sasl-init``; the layer answers through
a :class:`SaslPort`, the connection's small face (write bytes, send a frame, move its state,
record who logged in, wait for a password check, drop the connection). The rules
(:mod:`broker.amqp10.sasl` decides the mechanisms and the login):

- ``AMQP 3 1 0 0`` (SASL): our header and ``sasl-mechanisms``; ``sasl-init`` logs in (a
  password hash waits in ``AWAIT_LOGIN`` for the shell to run off the loop: the
  connection's ``password_checked`` then calls :meth:`SaslLayer.finish`); ``sasl-outcome``;
  then the client's ``AMQP 0 1 0 0`` and ours.
- A client the HA admission will refuse at ``open`` whatever its password (a backup, a
  primary not serving: ``AdmissionPolicy.refusal_before_login``, asked without client
  properties, which 1.0 sends only in ``open``: no 1.0 client is an HA admin or a
  backup's link) spends no password hash (issue 25: every client of a fail-over dials
  the backup): ``sasl-outcome`` ok ends the exchange without a user, and ``open`` gets
  the refusal, ``amqp:connection:redirect`` for a backup
  (:meth:`~broker.amqp10.connection.Connection.refusal_without_login`). SASL has no way
  to say "go elsewhere" (its outcomes are ok or a failure, which clients report as an
  authentication error); the connection reaches nothing but that refusal.
- ``AMQP 0 1 0 0`` straight away: only with authentication off, as ``anonymous``;
  otherwise answered with the SASL header and dropped.
- Any other header: answered with ours and dropped (``protocol_error``).

Call direction: the connection calls the layer; the layer calls only the port.

THREAD UNSAFE: the connection's event loop owns it.
"""

from __future__ import annotations

from typing import Any, Protocol

from broker.amqp.context import BrokerContext
from broker.amqp10 import codec, sasl
from broker.amqp10.codec import DecodeError
from broker.amqp10.framing import AMQP_HEADER, FRAME_SASL, SASL_HEADER
from broker.amqp10.performatives import SASL_AUTH, SASL_OK, SaslInit, SaslMechanisms, SaslOutcome
from broker.amqp10.state import State
from broker.security.sasl import AuthenticationError, PasswordCheck

__all__ = ["SaslLayer", "SaslPort"]


class SaslPort(Protocol):
    """What the SASL layer needs of its connection."""

    @property
    def name(self) -> str:
        """The connection's name in logs."""
        ...

    @property
    def state(self) -> State: ...

    def set_state(self, new: State) -> None: ...

    def write(self, data: bytes) -> None: ...

    def send_frame(self, channel: int, performative: Any, kind: int = ...) -> None: ...

    def logged_in(self, user: str) -> None:
        """``user`` is who the client is (its AMQP header comes next)."""
        ...

    def wait_for_password(self, check: PasswordCheck) -> None:
        """Wait in ``AWAIT_LOGIN`` while the shell runs ``check`` off the loop."""
        ...

    def login_skipped(self) -> None:
        """No user: ``open`` is refused (the admission refuses the client whatever its
        password)."""
        ...

    def drop(self, reason: str) -> None:
        """Close the socket once what was written is sent, for ``reason``."""
        ...


class SaslLayer:
    """See the module docstring."""

    def __init__(
        self,
        port: SaslPort,
        ctx: BrokerContext,
        peer_host: str | None,
        tls_identity: str | None,
    ) -> None:
        self._port = port
        self._ctx = ctx
        self._peer_host = peer_host
        self._tls_identity = tls_identity

    def header(self, header: bytes) -> None:
        """A protocol header read (the first, or the AMQP one after SASL)."""
        port, authenticator = self._port, self._ctx.authenticator
        if port.state is State.AWAIT_AMQP_HEADER:
            if header != AMQP_HEADER:
                self._refuse(AMQP_HEADER, f"expected the AMQP header, got {header!r}")
                return
            port.write(AMQP_HEADER)
            port.set_state(State.AWAIT_OPEN)
        elif header == SASL_HEADER:
            port.write(SASL_HEADER)
            mechanisms = sasl.offered(authenticator, self._tls_identity)
            port.send_frame(0, SaslMechanisms(mechanisms), FRAME_SASL)
            port.set_state(State.AWAIT_SASL_INIT)
        elif header == AMQP_HEADER and not authenticator.auth_enabled:
            port.write(AMQP_HEADER)
            port.logged_in("anonymous")
            port.set_state(State.AWAIT_OPEN)
        else:
            why = "without SASL while authentication is on" if header == AMQP_HEADER else ""
            self._refuse(SASL_HEADER, f"protocol header {header!r} {why}".strip())

    def frame(self, kind: int, body: bytes) -> None:
        """A frame while the connection waits for ``sasl-init``."""
        try:
            init, _ = codec.decode(body) if kind == FRAME_SASL else (None, 0)
        except DecodeError:
            init = None
        if not isinstance(init, SaslInit):
            self._failed("?", "expected sasl-init")
            return
        mechanism = str(init.mechanism)
        try:
            outcome = sasl.begin_login(
                self._ctx.authenticator,
                mechanism,
                bytes(init.initial_response or b""),
                self._peer_host,
                self._tls_identity,
            )
        except AuthenticationError as exc:
            self._failed(mechanism, str(exc))
            return
        if isinstance(outcome, PasswordCheck):
            admission = self._ctx.admission
            if admission is not None and admission.refusal_before_login({}) is not None:
                self._skipped()  # refused at open whatever the password: no hash spent
                return
            self._port.wait_for_password(outcome)  # the shell runs the hash in a thread
            return
        self._succeeded(outcome)

    def finish(self, check: PasswordCheck, matched: bool) -> None:
        """The shell ran ``check`` (``matched``: the password is right): log in or fail."""
        try:
            user = self._ctx.authenticator.finish(check, matched)
        except AuthenticationError as exc:
            self._failed(check.mechanism, str(exc))
            return
        self._succeeded(user)

    def _succeeded(self, user: str) -> None:
        port = self._port
        port.logged_in(user)
        port.send_frame(0, SaslOutcome(code=SASL_OK), FRAME_SASL)
        port.set_state(State.AWAIT_AMQP_HEADER)

    def _skipped(self) -> None:
        port = self._port
        port.login_skipped()
        port.send_frame(0, SaslOutcome(code=SASL_OK), FRAME_SASL)
        port.set_state(State.AWAIT_AMQP_HEADER)

    def _failed(self, mechanism: str, reason: str) -> None:
        port = self._port
        self._ctx.log.warning(
            "authentication_failed", connection=port.name, mechanism=mechanism, reason=reason
        )
        port.send_frame(0, SaslOutcome(code=SASL_AUTH), FRAME_SASL)
        port.drop(f"SASL: {reason}")

    def _refuse(self, ours: bytes, reason: str) -> None:
        ctx = self._ctx
        ctx.protocol_errors_total += 1
        ctx.log.warning(
            "protocol_error", connection=self._port.name, reply_code=None, reason=reason
        )
        self._port.write(ours)
        self._port.drop(reason)
