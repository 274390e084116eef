"""MkDocs hook: the configuration reference, generated from the settings models.

A page holding ``<!-- settings: gateway -->`` or ``<!-- settings: worker -->`` gets the
table of that model's fields in its place, so the reference cannot drift from the code.
"""

from __future__ import annotations

import re
from typing import Any, Literal, get_args, get_origin

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings

from canonical.settings import GatewaySettings, documented_name
from workers.config import WorkerConfig

MODELS: dict[str, type[BaseSettings]] = {"gateway": GatewaySettings, "worker": WorkerConfig}
MARKER = re.compile(r"<!-- settings: (\w+) -->")
SECRET_TYPES = ("SecretStr",)


def _default(field: FieldInfo) -> str:
    if field.default is None:
        return "—"
    value = field.default
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 1024 * 1024:
        if value % (1024 * 1024) == 0:
            return f"`{value}` ({value // (1024 * 1024)} MiB)"
    text = str(value)
    return f"`{text}`" if text else "empty"


def _kind(field: FieldInfo) -> str:
    choices = get_args(field.annotation) if get_origin(field.annotation) is Literal else ()
    if choices:
        return "one of " + ", ".join(f"`{choice}`" for choice in choices)
    annotation = str(field.annotation).replace("typing.", "").replace("pathlib.", "")
    annotation = re.sub(r"<class '(\w+)'>", r"\1", annotation)
    if any(secret in annotation for secret in SECRET_TYPES):
        return "secret"
    return annotation.replace(" | None", "")


def _limits(field: FieldInfo) -> str:
    parts = []
    for item in field.metadata:
        for attr, sign in (("gt", ">"), ("ge", "≥"), ("lt", "<"), ("le", "≤")):
            bound = getattr(item, attr, None)
            if bound is not None:
                parts.append(f"{sign} {bound}")
    return ", ".join(parts)


def settings_table(model: type[BaseSettings]) -> str:
    """A Markdown table of every documented variable of ``model``."""
    rows = ["| variable | default | type | meaning |", "|---|---|---|---|"]
    for field in model.model_fields.values():
        name = documented_name(field)
        if name is None:
            continue
        kind = _kind(field)
        limits = _limits(field)
        if limits:
            kind = f"{kind} ({limits})"
        description = (field.description or "").replace("|", "\\|")
        rows.append(f"| `{name}` | {_default(field)} | {kind} | {description} |")
    return "\n".join(rows)


def on_page_markdown(markdown: str, **_: Any) -> str:
    return MARKER.sub(lambda match: settings_table(MODELS[match.group(1)]), markdown)
