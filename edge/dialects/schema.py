"""The dialects' JSON Schemas (draft 2020-12), generated from their TypedDicts.

`python -m edge.dialects.schema` writes `docs/protocol/schema/<dialect>.<direction>.json`;
`--check` only compares (exit status 1 when a committed file differs). The edge never
imports this module: it is for the docs and the tests.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from pydantic import TypeAdapter

from . import iris_frames, iris_server_frames, pheby_frames, pheby_server_frames

DRAFT = "https://json-schema.org/draft/2020-12/schema"
SCHEMA_DIR = Path(__file__).resolve().parents[2] / "docs" / "protocol" / "schema"
UNIONS: dict[tuple[str, str], Any] = {
    ("pheby", "client"): pheby_frames.ClientFrame,
    ("pheby", "server"): pheby_server_frames.ServerFrame,
    ("iris", "client"): iris_frames.ClientFrame,
    ("iris", "server"): iris_server_frames.ServerFrame,
}
TITLES = {
    "client": "frames a client sends (client → server)",
    "server": "frames the server sends (server → client)",
}


def generate(dialect: str, direction: str) -> dict[str, Any]:
    """One dialect's frames of one direction: a union discriminated by `type`."""
    body = TypeAdapter(UNIONS[(dialect, direction)]).json_schema()
    return {
        "$schema": DRAFT,
        "$id": f"{dialect}.{direction}.json",
        "title": f"{dialect}: {TITLES[direction]}",
        **body,
    }


def render(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, ensure_ascii=False) + "\n"


def files() -> dict[Path, str]:
    """Every schema file and its text."""
    return {
        SCHEMA_DIR / f"{dialect}.{direction}.json": render(generate(dialect, direction))
        for dialect, direction in UNIONS
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m edge.dialects.schema", description=__doc__)
    parser.add_argument("--check", action="store_true", help="compare, do not write")
    args = parser.parse_args(argv)
    stale = []
    for path, text in files().items():
        current = path.read_text(encoding="utf-8") if path.exists() else None
        if current == text:
            continue
        stale.append(path)
        if not args.check:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    for path in stale:
        print(f"{'stale' if args.check else 'wrote'} {path}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
