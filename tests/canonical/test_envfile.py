"""`.env` files: read as Hermes reads them (python-dotenv), written keeping every other line."""

from __future__ import annotations

import io
import stat
from pathlib import Path

from dotenv import dotenv_values
from hypothesis import given
from hypothesis import strategies as st

from canonical.envfile import env_line, read_env_file, update_env_file, updated_env_text

SAMPLE = """# Hermes home secrets
export OPENAI_API_KEY="sk-quoted # not a comment"
NTFY_TOPIC='single quoted'
ANDROID_TOKEN=old-token # the pairing token

MULTI="line one
line two"
BARE_KEY
"""


def test_quotes_export_lines_and_comments_read_as_hermes_reads_them(tmp_path: Path) -> None:
    path = tmp_path / ".env"
    path.write_text(SAMPLE, encoding="utf-8")
    assert read_env_file(path) == {
        "OPENAI_API_KEY": "sk-quoted # not a comment",
        "NTFY_TOPIC": "single quoted",
        "ANDROID_TOKEN": "old-token",
        "MULTI": "line one\nline two",
    }


def test_a_missing_file_sets_nothing(tmp_path: Path) -> None:
    assert read_env_file(tmp_path / ".env") == {}


def test_an_update_replaces_only_its_key_and_keeps_comments_and_other_lines() -> None:
    text = updated_env_text(SAMPLE, {"ANDROID_TOKEN": "new-token"})
    assert text == SAMPLE.replace(
        "ANDROID_TOKEN=old-token # the pairing token", "ANDROID_TOKEN=new-token"
    )


def test_an_exported_key_is_replaced_in_place_and_new_keys_are_appended() -> None:
    text = updated_env_text("export A=1\n# c\n", {"A": "2", "B": "3"})
    assert text == "A=2\n# c\nB=3\n"


def test_removed_keys_go_and_a_file_without_a_final_newline_gets_one() -> None:
    assert updated_env_text("A=1\nB=2", {}, remove=["A"]) == "B=2\n"


def test_the_file_is_written_private(tmp_path: Path) -> None:
    path = tmp_path / "home" / ".env"
    update_env_file(path, {"ANDROID_TOKEN": "t"})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert read_env_file(path) == {"ANDROID_TOKEN": "t"}


VALUES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00\r"))


# `${NAME}` is expanded by Hermes' loader whatever the quoting: no value we write has one.
@given(VALUES.filter(lambda value: "${" not in value))
def test_any_value_written_reads_back_the_same_with_hermes_interpolation(value: str) -> None:
    parsed = dotenv_values(stream=io.StringIO(env_line("KEY", value) + "\n"), interpolate=True)
    assert parsed == {"KEY": value}
