"""The published schemas are generated from the frames' TypedDicts and are up to date."""

from __future__ import annotations

from pathlib import Path

import pytest
from jsonschema import Draft202012Validator

from edge.dialects import schema


def test_the_committed_schemas_are_the_ones_the_typed_frames_generate() -> None:
    for path, text in schema.files().items():
        assert path.exists(), f"{path} is missing: run python -m edge.dialects.schema"
        assert path.read_text(encoding="utf-8") == text, (
            f"{path.name} is stale: run python -m edge.dialects.schema"
        )


def test_check_mode_reports_a_stale_file_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(schema, "SCHEMA_DIR", tmp_path)
    assert schema.main(["--check"]) == 1
    assert list(tmp_path.iterdir()) == []
    assert "stale" in capsys.readouterr().out
    assert schema.main([]) == 0
    assert schema.main(["--check"]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "iris.client.json",
        "iris.server.json",
        "pheby.client.json",
        "pheby.server.json",
    ]


@pytest.mark.parametrize("dialect", ["pheby", "iris"])
@pytest.mark.parametrize("direction", ["client", "server"])
def test_each_schema_is_a_valid_draft_2020_12_union_discriminated_by_type(
    dialect: str, direction: str
) -> None:
    generated = schema.generate(dialect, direction)
    Draft202012Validator.check_schema(generated)
    assert generated["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert generated["discriminator"]["propertyName"] == "type"
    mapping = generated["discriminator"]["mapping"]
    assert len(generated["oneOf"]) == len(mapping)
    for kind, ref in mapping.items():
        frame = generated["$defs"][ref.rsplit("/", 1)[1]]
        assert frame["properties"]["type"]["const"] == kind
        assert frame["additionalProperties"] is False, f"{kind} must list its fields exactly"
