"""How ``qpid-ha`` reads its command line, beyond what typer does.

- **Global options anywhere.** ``-b/--broker``, ``--timeout``, ``--cluster-manager``,
  ``--zk`` and ``--cluster`` are the root's, but, as with Qpid's ``qpid-ha``, they may also
  come after the verb: ``qpid-ha status -b HOST`` is ``qpid-ha -b HOST status``
  (:func:`hoist_global_options`). Not for ``drill``, whose ``--broker`` and ``--cluster``
  are its own.
- **One line for a wrong use.** Every usage error is ``qpid-ha: error: MESSAGE (see
  'qpid-ha VERB --help')`` on stderr and exit 2 (:func:`usage_line`), never click's
  four-line box.
- **Help lists everything.** A verb's ``--help`` lists its own options and then the global
  options it also takes (:class:`VerbCommand`), each with its default; help is plain text
  wrapped to the terminal (or 80 columns), never cut.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from typer.core import TyperCommand

if TYPE_CHECKING:  # typer's vendored click
    from typer._click import Command, Context, HelpFormatter, Parameter
    from typer._click.exceptions import ClickException

__all__ = [
    "GLOBAL_FLAGS",
    "GLOBAL_VALUE_OPTIONS",
    "OwnOptionsCommand",
    "VerbCommand",
    "format_params",
    "help_record",
    "hoist_global_options",
    "usage_line",
]

#: Global options that take a value (``-b X``, ``--broker=X``, ``-bX``).
GLOBAL_VALUE_OPTIONS = ("-b", "--broker", "--timeout", "--zk", "--cluster")
#: Global flags.
GLOBAL_FLAGS = ("--cluster-manager",)
#: Verbs with options of their own under the global names: left alone.
OWN_OPTIONS_VERBS = frozenset({"drill"})


def _global_length(args: Sequence[str], i: int) -> int:
    """How many tokens the global option at ``args[i]`` spans (0: not a global option)."""
    token = args[i]
    if token in GLOBAL_FLAGS:
        return 1
    if token in GLOBAL_VALUE_OPTIONS:
        return 2 if i + 1 < len(args) else 1
    name, eq, _ = token.partition("=")
    if eq and name in GLOBAL_VALUE_OPTIONS and name.startswith("--"):
        return 1
    if token.startswith("-b") and not token.startswith("--") and len(token) > 2:
        return 1  # -bHOST
    return 0


def hoist_global_options(args: Sequence[str], verbs: Sequence[str]) -> list[str]:
    """``args`` with the global options given after the verb moved before it.

    The verb is the first word that is not a global option or its value; nothing moves when
    it is not one of ``verbs`` (click reports it) or is a verb with options of its own
    under the global names. Nothing after ``--`` moves.
    """
    out = list(args)
    i = 0
    while i < len(out):
        length = _global_length(out, i)
        if length:
            i += length
            continue
        if out[i].startswith("-"):  # --help, or a wrong option: click says which
            i += 1
            continue
        break
    verb_at = i
    if verb_at >= len(out) or out[verb_at] not in verbs or out[verb_at] in OWN_OPTIONS_VERBS:
        return out
    before, verb, rest = out[:verb_at], out[verb_at], out[verb_at + 1 :]
    moved: list[str] = []
    kept: list[str] = []
    j = 0
    while j < len(rest):
        if rest[j] == "--":
            kept += rest[j:]
            break
        length = _global_length(rest, j)
        if length:
            moved += rest[j : j + length]
            j += length
        else:
            kept.append(rest[j])
            j += 1
    return [*before, *moved, verb, *kept]


def usage_line(error: ClickException, program: str, command_path: str | None = None) -> str:
    """The one line for a usage error: ``PROGRAM: error: MESSAGE (see 'PATH --help')``;
    PATH is the error's command, else ``command_path``."""
    message = " ".join(error.format_message().split())
    ctx: Context | None = getattr(error, "ctx", None)
    path = ctx.command_path if ctx is not None else command_path
    hint = f" (see '{path} --help')" if path else ""
    return f"{program}: error: {message}{hint}"


def help_record(param: Parameter, ctx: Context) -> tuple[str, str] | None:
    """``param``'s help line, always saying its default: ``[default: off]`` for a flag
    that is off, ``[default: none]`` for an option without one."""
    record = param.get_help_record(ctx)
    if record is None or param.param_type_name != "option" or param.name == "help":
        return record
    names, text = record
    if "default" in text.lower():
        return record
    if getattr(param, "is_flag", False):
        default = "on" if param.default else "off"
    elif param.default is None:
        default = "none"
    else:
        default = str(param.default)
    return names, f"{text}  [default: {default}]".strip()


def format_params(
    command: Command, ctx: Context, formatter: HelpFormatter, title: str = "Options"
) -> None:
    """The Arguments and Options sections of ``command``'s help, defaults included."""
    args: list[tuple[str, str]] = []
    opts: list[tuple[str, str]] = []
    for param in command.get_params(ctx):
        record = help_record(param, ctx)
        if record is not None:
            (args if param.param_type_name == "argument" else opts).append(record)
    if args:
        with formatter.section("Arguments"):
            formatter.write_dl(args)
    if opts:
        with formatter.section(title):
            formatter.write_dl(opts)


class OwnOptionsCommand(TyperCommand):
    """A verb that takes no global option (``drill``): its help lists its own, with
    their defaults."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        format_params(self, ctx, formatter)


class VerbCommand(TyperCommand):
    """A verb whose help also lists the global options (taken before or after it)."""

    def format_options(self, ctx: Context, formatter: HelpFormatter) -> None:
        format_params(self, ctx, formatter)
        root = ctx.find_root()
        if root is ctx:
            return
        records = [
            record
            for param in root.command.get_params(root)
            if param.name != "help" and (record := help_record(param, root)) is not None
        ]
        if records:
            with formatter.section("Global options (before or after the verb)"):
                formatter.write_dl(records)


def command_settings() -> dict[str, Any]:
    """What every verb's ``@app.command(...)`` takes: the help-listing class."""
    return {"cls": VerbCommand}
