"""``qpid-ha``: the operator's command line for a broker's HA status.

Today it has the read-only verbs that work on any broker, through its management API:
``ping`` and ``status``. The HA verbs of Qpid's tool (``query``, ``ready``, ``promote``,
``replicate``) arrive with the replication issue.

Exit codes (one place, :class:`ExitStatus`): 0 success, 1 the expectation did not hold,
2 bad usage, 3 the broker is unreachable.
"""

from __future__ import annotations

import base64
import json
import sys
import urllib.error
import urllib.request
from enum import IntEnum
from typing import Annotated, Any

import typer

from broker.url import BrokerUrl, parse_url

DEFAULT_MGMT_PORT = 8672


class ExitStatus(IntEnum):
    SUCCESS = 0
    ERROR = 1
    USAGE = 2
    UNREACHABLE = 3


app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="Check and manage qpidd brokers (Qpid's qpid-ha verbs).",
)


class Settings:
    broker: BrokerUrl
    timeout: float = 10.0


settings = Settings()


def _fail(message: str, code: ExitStatus) -> typer.Exit:
    typer.echo(f"qpid-ha: error: {message}", err=True)
    return typer.Exit(int(code))


def _get(path: str) -> Any:
    address = settings.broker.addresses[0]
    request = urllib.request.Request(f"http://{address}{path}")
    if settings.broker.user is not None:
        token = f"{settings.broker.user}:{settings.broker.password or ''}".encode()
        request.add_header("Authorization", "Basic " + base64.b64encode(token).decode())
    try:
        with urllib.request.urlopen(request, timeout=settings.timeout) as response:
            return json.load(response)
    except urllib.error.HTTPError as exc:
        raise _fail(f"{address} answered HTTP {exc.code} for {path}", ExitStatus.ERROR) from exc
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        reason = getattr(exc, "reason", exc)
        raise _fail(f"cannot reach broker {address}: {reason}", ExitStatus.UNREACHABLE) from exc
    except json.JSONDecodeError as exc:
        raise _fail(f"{address} sent a non-JSON answer for {path}", ExitStatus.ERROR) from exc


@app.callback()
def main_options(
    broker: Annotated[
        str,
        typer.Option(
            "-b",
            "--broker",
            help="management address of the broker, \\[user/password@]host\\[:port]",
        ),
    ] = f"localhost:{DEFAULT_MGMT_PORT}",
    timeout: Annotated[
        float, typer.Option("--timeout", min=0.001, help="seconds to wait for an answer")
    ] = 10.0,
) -> None:
    try:
        url = parse_url(broker, default_port=DEFAULT_MGMT_PORT)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="'-b' / '--broker'") from exc
    if len(url.addresses) != 1:
        raise typer.BadParameter(
            f"expected one broker address, got {len(url.addresses)}",
            param_hint="'-b' / '--broker'",
        )
    settings.broker = url
    settings.timeout = timeout


@app.command()
def ping() -> None:
    """Check that the broker answers; exit 0 when it does."""
    _get("/api/status")


@app.command()
def status(
    expect: Annotated[
        str | None,
        typer.Option(
            "--expect", help="exit 1 unless the broker is in this HA state (e.g. standalone)"
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="print the status as JSON")] = False,
) -> None:
    """Print the broker's HA state."""
    data = _get("/api/status")
    state = str(data.get("ha_state", "unknown"))
    if as_json:
        typer.echo(json.dumps(data, indent=2, sort_keys=True))
    else:
        typer.echo(state)
    if expect is not None and expect != state:
        raise typer.Exit(int(ExitStatus.ERROR))


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:  # pragma: no cover - interactive
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
