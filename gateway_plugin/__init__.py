"""Hermes platform plugin `android-platform`: the device gateway's controller.

Kept import-light: Hermes discovers plugins in every CLI process, so importing this
package does nothing but define `register`.
"""

from __future__ import annotations

from typing import Any


def register(ctx: Any) -> None:
    from gateway_plugin.hermes.bridge import register_platform

    register_platform(ctx)
