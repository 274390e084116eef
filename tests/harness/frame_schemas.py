"""The committed JSON Schemas of both dialects (docs/protocol/schema/), as validators.

One validator per dialect, direction and frame type, compiled once per process: the
frame's `type` picks its definition (the schemas' `discriminator` mapping), so a frame
that does not match is named with the exact field at fault rather than "not valid under
any of the given schemas".
"""

from __future__ import annotations

import functools
import json
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import best_match

from canonical.model import Json
from edge.dialects.schema import DRAFT, SCHEMA_DIR

DIRECTIONS = ("client", "server")


@functools.cache
def committed(dialect: str, direction: str) -> Json:
    schema: Json = json.loads(
        (SCHEMA_DIR / f"{dialect}.{direction}.json").read_text(encoding="utf-8")
    )
    return schema


def frame_types(dialect: str, direction: str) -> frozenset[str]:
    return frozenset(committed(dialect, direction)["discriminator"]["mapping"])


@functools.cache
def _validator(dialect: str, direction: str, kind: str) -> Draft202012Validator | None:
    schema = committed(dialect, direction)
    ref = schema["discriminator"]["mapping"].get(kind)
    if ref is None:
        return None
    return Draft202012Validator({"$schema": DRAFT, "$defs": schema["$defs"], "$ref": ref})


def problem(dialect: str, direction: str, frame: Any) -> str | None:
    """Why `frame` does not match the dialect's schema of that direction; None if it does."""
    where = f"{dialect}.{direction}.json"
    kind = frame.get("type") if isinstance(frame, dict) else None
    if not isinstance(kind, str):
        return f"{where}: a frame without a string type: {str(frame)[:300]}"
    validator = _validator(dialect, direction, kind)
    if validator is None:
        return f"{where}: frame type {kind!r} is not in the schema: {str(frame)[:300]}"
    error = best_match(validator.iter_errors(frame))
    if error is None:
        return None
    path = "/".join(str(part) for part in error.absolute_path) or "(the frame)"
    return f"{where}: frame {kind!r} at {path}: {error.message} — {str(frame)[:500]}"
