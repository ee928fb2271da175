"""Helpers of the console tests: a users file with one user a role, an HTTP client that
logs in like a browser (a cookie jar), and where screenshots go."""

from __future__ import annotations

import http.cookiejar
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from broker.security.passwords import hash_password, parse_hash
from broker.security.roles import ALL_ROLES, Role
from broker.security.users import User, UserDatabase, save

ROOT = Path(__file__).resolve().parents[2]

#: name -> (password, roles). guest keeps every role: the agents and the HA links use it.
USERS: dict[str, tuple[str, frozenset[Role]]] = {
    "guest": ("guest", ALL_ROLES),
    "admin": ("admin-secret", frozenset({Role.ADMINISTRATOR, Role.MONITORING})),
    "watcher": ("watcher-secret", frozenset({Role.MONITORING})),
    "manager": ("manager-secret", frozenset({Role.CLUSTER_MANAGER, Role.MONITORING})),
    "app": ("app-secret", frozenset()),
}


def write_users(path: Path) -> Path:
    """The users file of :data:`USERS` (cheap hashes: nothing here is kept)."""
    users = UserDatabase(
        User(name, parse_hash(hash_password(password, log_n=10)), roles)
        for name, (password, roles) in USERS.items()
    )
    save(users, path)
    return path


def screenshot_dir() -> Path:
    """``docs/console`` with ``CONSOLE_SCREENSHOTS=1`` (to refresh the docs' pictures), else
    a temporary directory, so a test run leaves the tree as it was."""
    if os.environ.get("CONSOLE_SCREENSHOTS") == "1":
        target = ROOT / "docs" / "console"
        target.mkdir(parents=True, exist_ok=True)
        return target
    return Path(tempfile.mkdtemp(prefix="console-screenshots-"))


class Answer:
    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class Browserless:
    """An HTTP client with a cookie jar and no redirects followed: a browser's requests."""

    def __init__(self, mgmt_port: int) -> None:
        self.base = f"http://127.0.0.1:{mgmt_port}"
        self.jar = http.cookiejar.CookieJar()
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(self.jar), _NoRedirect()
        )

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        form: dict[str, str] | None = None,
        headers: dict[str, str] | None = None,
        timeout: float = 10.0,
        read: bool = True,
    ) -> Answer:
        data = None
        all_headers = dict(headers or {})
        if form is not None:
            data = urllib.parse.urlencode(form).encode()
            all_headers["Content-Type"] = "application/x-www-form-urlencoded"
        elif body is not None:
            data = json.dumps(body).encode()
            all_headers["Content-Type"] = "application/json"
        request = urllib.request.Request(
            self.base + path, data=data, method=method, headers=all_headers
        )
        try:
            with self.opener.open(request, timeout=timeout) as response:
                return Answer(
                    response.status, dict(response.headers), response.read() if read else b""
                )
        except urllib.error.HTTPError as exc:
            return Answer(exc.code, dict(exc.headers), exc.read())

    def login(self, user: str, password: str | None = None) -> Answer:
        password = USERS[user][0] if password is None else password
        return self.request("POST", "/console/login", form={"user": user, "password": password})

    def change(self, method: str, path: str, body: Any = None) -> Answer:
        """A change as the console's script makes it (with its header)."""
        return self.request(method, path, body, headers={"X-Qpidd-Console": "1"})
