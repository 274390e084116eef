"""``python -m scripted_model`` / ``hdg-scripted-model``: run the scripted model server."""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from scripted_model.server import run


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hdg-scripted-model",
        description="Scripted OpenAI-compatible model server for tests and key-less demos.",
    )
    parser.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8089, help="TCP port (default 8089)")
    parser.add_argument(
        "--first-token-delay",
        type=float,
        default=0.0,
        help="seconds to wait before the first streamed chunk (default 0)",
    )
    parser.add_argument(
        "--chunk-delay",
        type=float,
        default=0.02,
        help="seconds between streamed chunks (default 0.02; [long]/[verylong] use 0.05)",
    )
    parser.add_argument(
        "--log-file", default=None, help="also append every request record to this JSONL file"
    )
    parser.add_argument(
        "--exit-with-parent",
        action="store_true",
        help="stop when the process that started this one is gone, however it ended",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    run(
        args.host,
        args.port,
        first_token_delay=args.first_token_delay,
        chunk_delay=args.chunk_delay,
        log_file=args.log_file,
        exit_with_parent=args.exit_with_parent,
    )


if __name__ == "__main__":
    main()
