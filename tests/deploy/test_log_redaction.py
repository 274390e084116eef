"""canonical.logredact: what never reaches a log line."""

from __future__ import annotations

import logging

import pytest

from canonical import logredact
from canonical.logredact import MASK, RedactingFilter, redact

SECRET = "a-registered-secret-" + "s" * 20


@pytest.fixture(autouse=True)
def _registered() -> None:
    logredact.add_secret(SECRET)


@pytest.mark.parametrize(
    ("line", "hidden"),
    [
        ("ANDROID_TOKEN=abcdefghijkl", "abcdefghijkl"),
        ("GET /ws?token=abcdefghijkl&v=1", "abcdefghijkl"),
        ("hermes-device://pair?v=1&host=h&token=Xy_-z123456&name=H", "Xy_-z123456"),
        ('{"type": "hello", "token": "abcdefghijkl", "device_id": "p1"}', "abcdefghijkl"),
        ("{'secret': 'abcdefghijkl', 'protocol_version': 1}", "abcdefghijkl"),
        ('{"admin_token": "abcdefghijkl"}', "abcdefghijkl"),
        ('{"fcm_token": "abc:def-ghijkl"}', "abc:def-ghijkl"),
        ("Authorization: Bearer abcdefghijkl", "abcdefghijkl"),
        ('{"type": "message.send", "text": "my private message"}', "my private message"),
        ('{"role": "user", "content": "my \\"quoted\\" words"}', "quoted"),
        (f"something mentions {SECRET} in passing", SECRET),
        ("NTFY_PASSWORD=hunter2hunter2", "hunter2hunter2"),
    ],
)
def test_credentials_and_message_bodies_are_masked(line: str, hidden: str) -> None:
    masked = redact(line)
    assert hidden not in masked
    assert MASK in masked


@pytest.mark.parametrize(
    "line",
    [
        "hello refused source=127.0.0.1 code=unauthorized failures=1",
        "prompt_tokens=12 completion_tokens=40",
        "edge e1 listening on 0.0.0.0:8790",
    ],
)
def test_ordinary_lines_are_left_alone(line: str) -> None:
    assert redact(line) == line


def test_the_filter_masks_arguments_and_tracebacks(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("hdg.test.redaction")
    logger.addFilter(RedactingFilter())
    try:
        with caplog.at_level(logging.INFO, logger="hdg.test.redaction"):
            logger.info("hello with %s", {"token": "abcdefghijkl"})
            try:
                raise ValueError(f"bad url ws://h/ws?token={SECRET}")
            except ValueError:
                logger.exception("failed")
    finally:
        logger.filters.clear()
    text = caplog.text
    assert "abcdefghijkl" not in text
    assert SECRET not in text
    assert "bad url" in text


@pytest.mark.parametrize("name", ["hdg.plugin", "gateway_plugin.channels.search", "edge.app"])
def test_install_redacts_the_records_of_our_loggers(
    name: str, caplog: pytest.LogCaptureFixture
) -> None:
    logredact.install([SECRET])
    logredact.install()  # idempotent
    with caplog.at_level(logging.WARNING, logger=name):
        logging.getLogger(name).warning("connecting with secret=%s", "abcdefghijkl")
        logging.getLogger(name).warning("raw %s", SECRET)
        logging.getLogger(name).warning("sent %s", {"type": "message.send", "text": "a body"})
    assert "abcdefghijkl" not in caplog.text
    assert SECRET not in caplog.text
    assert "a body" not in caplog.text
    assert caplog.text.count(MASK) == 3


def test_install_leaves_hermes_records_as_hermes_wrote_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    logredact.install([SECRET])
    hermes = logging.getLogger("gateway.run")
    with caplog.at_level(logging.WARNING, logger="gateway.run"):
        hermes.warning("message %s", {"role": "user", "content": "what Hermes logs"})
    (record,) = [r for r in caplog.records if r.name == "gateway.run"]
    assert record.msg == "message %s"
    assert record.args == {"role": "user", "content": "what Hermes logs"}
    assert "what Hermes logs" in caplog.text
    assert MASK not in caplog.text


def test_our_records_still_reach_stderr_when_logging_is_not_configured(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    logredact.install()
    root = logging.getLogger()
    monkeypatch.setattr(root, "handlers", [])  # no handler anywhere: Python's last resort
    logging.getLogger("hdgctl.ops").warning("token=%s", "abcdefghijkl")
    err = capsys.readouterr().err
    assert f"token={MASK}" in err
    assert "abcdefghijkl" not in err
