"""`.env` files read and written the way Hermes reads them: with python-dotenv.

Reading is ``dotenv_values`` (quotes, ``export`` lines, comments, ``${VAR}`` expansion,
values over several lines), exactly what Hermes loads at start-up. Writing changes only
the keys asked for and keeps every other line as it was, comments included.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from dotenv import dotenv_values
from dotenv.parser import parse_stream

# Written bare when the value needs no quoting; otherwise in single quotes, where
# python-dotenv undoes only \\ and \' (nothing is expanded inside them).
_BARE = re.compile(r"^[A-Za-z0-9_./:@+,%=~-]*$")


def read_env_file(path: Path) -> dict[str, str]:
    """The variables a `.env` file sets (a key without ``=`` sets nothing)."""
    if not path.exists():
        return {}
    values = dotenv_values(path, encoding="utf-8")
    return {key: value for key, value in values.items() if value is not None}


def env_line(key: str, value: str) -> str:
    """One ``KEY=value`` line that python-dotenv reads back as ``value`` (unless it holds
    ``${NAME}``, which Hermes' loader expands in any quoting; tokens and paths never do)."""
    if _BARE.match(value):
        return f"{key}={value}"
    escaped = value.replace("\\", "\\\\").replace("'", "\\'")
    return f"{key}='{escaped}'"


def updated_env_text(text: str, updates: Mapping[str, str], remove: Iterable[str] = ()) -> str:
    """``text`` with the ``updates`` keys set (in place, else appended) and the ``remove``
    keys dropped; every other line, comment and blank line kept as it was."""
    pending = dict(updates)
    dropped = set(remove) - set(pending)
    out: list[str] = []
    for binding in parse_stream(io.StringIO(text)):
        original = binding.original.string
        if binding.key is not None and binding.key in pending:
            out.append(env_line(binding.key, pending.pop(binding.key)) + "\n")
        elif binding.key is not None and binding.key in dropped:
            continue
        else:
            out.append(original)
    body = "".join(out)
    if body and not body.endswith("\n"):
        body += "\n"
    return body + "".join(env_line(key, value) + "\n" for key, value in pending.items())


def update_env_file(path: Path, updates: Mapping[str, str], remove: Iterable[str] = ()) -> None:
    """Apply :func:`updated_env_text` to the file, atomically; the file is mode 0600."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    tmp = path.with_name(path.name + ".tmp")
    # A new file, private from its creation: never a moment readable by others (nor a
    # leftover file someone else may already hold open).
    with contextlib.suppress(FileNotFoundError):
        tmp.unlink()
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(updated_env_text(text, updates, remove))
    os.replace(tmp, path)


__all__ = ["env_line", "read_env_file", "update_env_file", "updated_env_text"]
