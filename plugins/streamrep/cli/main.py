"""The ``streamrep`` command line, in maprcli's grammar.

    streamrep stream replica add -path /mapr/sanfrancisco/activity -replica /mapr/newyork/activity -paused true

Every handler is a thin call into the client layer. Exit status: 0 success, 1 a user error
(one line on stderr), 2 a malformed command line, 3 a bug (``STREAMREP_DEBUG=1`` shows its
traceback). With ``-json`` an error is also maprcli's error envelope on stdout.

Each command group is a module of this package (cluster, stream, topic, replica, cursor, upstream,
copystream, diff, gateway, data), holding its handlers and its part of ``COMMANDS``.
"""

from __future__ import annotations

import errno
import os
import sys
from importlib.metadata import PackageNotFoundError
from importlib.metadata import version as package_version
from typing import Any, TextIO, cast

from streamrep.cli import (
    cluster,
    copystream,
    cursor,
    data,
    diff,
    gateway,
    importstream,
    replica,
    stream,
    topic,
    upstream,
)
from streamrep.cli.common import Context, OutputFailed, Rows, reason
from streamrep.cli.grammar import Command, split_words, wants_help, wants_json
from streamrep.cli.output import print_error_json, print_rows
from streamrep.errors import InvalidArgument, StreamrepError

EXIT_USER_ERROR = 1
EXIT_USAGE = 2
EXIT_INTERNAL = 3

# Every command, in the order 'streamrep help' lists them.
COMMANDS: tuple[Command, ...] = (
    *cluster.COMMANDS,
    *stream.COMMANDS,
    *topic.COMMANDS,
    *replica.COMMANDS,
    *cursor.COMMANDS,
    *copystream.COMMANDS,
    *diff.COMMANDS,
    *importstream.COMMANDS,
    *gateway.COMMANDS,
    *upstream.COMMANDS,
    *data.COMMANDS,
)

# Handlers told whether -json was given: without it they print their own lines (messages, a summary).
SHOW_THEIR_OWN_JSON = (data.consume, diff.diffstreams, diff.diffstreamswithcrc, importstream.importstream)


def help_text(prefix: tuple[str, ...] = ()) -> str:
    """One command's full usage, or the list of commands under ``prefix``."""
    for cmd in COMMANDS:
        if cmd.words == prefix:
            return cmd.help_text()
    listed = [cmd for cmd in COMMANDS if cmd.words[: len(prefix)] == prefix]
    if not listed:
        raise InvalidArgument(f"unknown command '{' '.join(prefix)}'; run 'streamrep help' for the list")
    lines = [
        "usage: streamrep <command> [-option value ...] [-json]",
        "       streamrep help <command>, or <command> -help: a command's options",
        "",
        "commands:",
    ]
    lines += [f"  {' '.join(cmd.words):24} {cmd.help}" for cmd in listed]
    return "\n".join(lines)


def find_command(words: list[str]) -> Command:
    for cmd in COMMANDS:
        if list(cmd.words) == words:
            return cmd
    if any(cmd.words[: len(words)] == tuple(words) for cmd in COMMANDS) and words:
        subs = sorted(
            {
                cmd.words[len(words)]
                for cmd in COMMANDS
                if cmd.words[: len(words)] == tuple(words) and len(cmd.words) > len(words)
            }
        )
        raise InvalidArgument(f"'{' '.join(words)}' needs a subcommand: {', '.join(subs)}")
    raise InvalidArgument(f"unknown command '{' '.join(words)}'; run 'streamrep help' for the list")


def streamrep_version() -> str:
    try:
        return package_version("streamrep")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def succeeded(rows: Rows) -> str:
    """What a command whose result could not be printed did anyway."""
    messages = sum(row.get("messages") or 0 for row in rows)
    return (
        f"the command succeeded: {messages} messages are committed, do not repeat it"
        if messages
        else "the command itself succeeded"
    )


def one_line(message: str) -> str:
    """``message`` with control characters escaped: a value holding a newline stays on the line."""
    return "".join(ch if ch.isprintable() else repr(ch)[1:-1] for ch in message)


def write_out(out: TextIO, text: str) -> int:
    """Print ``text`` (help, version); OutputFailed if stdout cannot take it."""
    try:
        out.write(text + "\n")
        out.flush()
    except OSError as error:
        raise OutputFailed(f"cannot write to stdout ({reason(error)})") from None
    return 0


def run(argv: list[str], out: TextIO | None = None, err: TextIO | None = None, stdin: TextIO | None = None) -> int:
    """Run one command; returns the exit status. Every error a user can cause is one line on
    ``err`` (and with ``-json`` an error envelope on ``out``)."""
    out = out if out is not None else sys.stdout
    err = err if err is not None else sys.stderr
    stdin = stdin if stdin is not None else sys.stdin
    words, options = split_words(argv)
    as_json = wants_json(options)
    ctx = Context(out, err, stdin)
    try:
        try:
            text = help_or_version(argv, words, options)
            if text is not None:
                return write_out(out, text)
            cmd = find_command(words)
            values, as_json = cmd.parse(options)
        except InvalidArgument as usage_error:
            return report_error(str(usage_error), EXIT_USAGE, as_json, out, err)
        if cmd.handler in SHOW_THEIR_OWN_JSON:
            values["as_json"] = as_json
        rows = cmd.handler(ctx, **values)
        if rows is not None:
            print_result(rows, as_json, out)
        return 0
    except StreamrepError as error:
        return report_error(str(error), EXIT_USER_ERROR, as_json, out, err)
    except OSError as error:  # the environment (a file, a pipe, a disk), not the input
        where = f": {error.filename}" if error.filename else ""
        return report_error(f"{reason(error)}{where}", EXIT_USER_ERROR, as_json, out, err)
    except KeyboardInterrupt:
        return 130
    finally:
        if ctx._admin is not None:
            ctx._admin.clusters.close()


def help_or_version(argv: list[str], words: list[str], options: list[str]) -> str | None:
    """The text to print when the command line asks for the version or help, else None."""
    if argv[:1] and argv[0].lower() in ("--version", "-version", "version"):
        return f"streamrep {streamrep_version()}"
    if not words or words[0].lower() in ("help", "-help", "--help", "-h"):
        return help_text(tuple(words[1:]))
    if wants_help(options):
        return help_text(tuple(words))
    return None


def print_result(rows: Rows, as_json: bool, out: TextIO) -> None:
    """Print a command's rows; OutputFailed, saying what the command did anyway, if stdout cannot take them."""
    try:
        print_rows(rows, as_json, out)
        out.flush()
    except (OSError, ValueError) as error:
        why = reason(error) if isinstance(error, OSError) else "stdout is closed"
        raise OutputFailed(f"cannot write the result to stdout ({why}); {succeeded(rows)}") from None


def report_error(message: str, status: int, as_json: bool, out: TextIO, err: TextIO) -> int:
    """Report an error as one line on ``err`` (and with ``-json`` an error envelope on ``out``); returns ``status``."""
    message = one_line(message)
    if as_json:
        try:
            print_error_json(message, out)
            out.flush()
        except (OSError, ValueError):
            pass  # stdout is gone: the line on stderr still says it
    try:
        err.write(f"streamrep: error: {message}\n")
        err.flush()
    except (OSError, ValueError):
        pass
    return status


class ClosedStream:
    """Stands in for a standard stream the process was started without (``>&-``, ``<&-``)."""

    def __init__(self, name: str):
        self.name = name

    def _closed(self, *_args: Any) -> Any:
        raise OSError(errno.EBADF, f"{self.name} is closed")

    write = flush = read = readline = __next__ = _closed

    def __iter__(self) -> ClosedStream:
        return self


def main() -> None:
    # A ClosedStream has the few methods run() calls on a TextIO.
    out = sys.stdout or cast(TextIO, ClosedStream("stdout"))
    err = sys.stderr or open(os.devnull, "w")
    stdin = sys.stdin or cast(TextIO, ClosedStream("stdin"))
    try:
        status = run(sys.argv[1:], out, err, stdin)
    except Exception as error:  # a bug, not a user error: one line unless debugging
        if os.environ.get("STREAMREP_DEBUG"):
            raise
        err.write(f"streamrep: internal error: {type(error).__name__}: {error} (set STREAMREP_DEBUG=1 for details)\n")
        status = EXIT_INTERNAL
    if sys.stdout is not None:
        try:
            sys.stdout.flush()
        except (OSError, ValueError):
            # What could not be written was reported; the interpreter's own flush at exit
            # would only add a traceback.
            try:
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            except (OSError, ValueError):
                pass
    sys.exit(status)
