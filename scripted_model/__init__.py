"""Scripted OpenAI-compatible model server (tests and key-less demos).

``python -m scripted_model --port N`` or ``hdg-scripted-model``; importable as
:func:`scripted_model.server.build_app` / :func:`scripted_model.server.run`.
"""

from scripted_model.scenarios import Reply, ToolCall, plan_reply
from scripted_model.server import MODEL_IDS, build_app, run

__all__ = ["MODEL_IDS", "Reply", "ToolCall", "build_app", "plan_reply", "run"]
