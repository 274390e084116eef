"""What the canonical model's representation costs on the fan-out path, per event.

    .venv/bin/python bench/model_cost.py [--quick] [--name NAME] [--out PATH]

The fan-out path for one event: the plugin builds it once and encodes it for the bus; an
edge parses it once and encodes it once per dialect (canonical/model/events.py). This
times that path with the event represented three ways, everything else equal (the same
JSON encoder, the same codecs):

- ``typeddict``: canonical.model's TypedDicts, i.e. plain dicts (what the code uses);
- ``pydantic``: a pydantic v2 model per event, built and validated where it is made and
  again where it is parsed, dumped to a dict for the codecs;
- ``dataclass``: a slotted dataclass per event (no validation), ``asdict`` for the codecs.

Events: a ``message.delta`` (the most frequent) and a ``message.complete``, as the plugin's
own TurnTracker builds them. Reports µs per event (best of 5 repeats) for the plugin's
half (build + encode), the edge's half (parse + encode for pheby and iris) and the sum.
Writes ``--out`` (else bench/results/local/model_cost[-quick].json), a result file of
``bench.results``: µs per event per event kind, representation and side.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import timeit
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pydantic

from bench.host import Json
from bench.results import begin, figure
from bench.stats import result_name, write_timed_result
from canonical.jsonenc import dumps_clean
from edge.dialects.iris import IrisDialect
from edge.dialects.pheby import PhebyDialect
from gateway_plugin.delivery.turns import TurnTracker

PHEBY, IRIS = PhebyDialect(), IrisDialect()
LANE = ("android:default", None)


def sample_events() -> dict[str, Json]:
    turns = TurnTracker()
    run, _ = turns.accept(LANE, "c" * 32, run_id="r" * 32, request_id="q1", client_id="cl-1")
    _, deltas = turns.on_send(run, "The weather in Lisbon today is sunny, 24 °C, light wind. " * 4)
    closing = turns.finish(LANE, "completed", None)
    complete = next(e for e in closing if e["type"] == "message.complete")
    return {
        "message.delta": {**deltas[-1], "cursor": 41},
        "message.complete": {**complete, "cursor": 42},
    }


class DeltaModel(pydantic.BaseModel):
    type: str
    lane: list[str | None]
    conversation_id: str
    run_id: str
    message_id: str
    text: str
    reply: str | None = None
    ts: str
    cursor: int | None = None


class CompleteModel(pydantic.BaseModel):
    model_config = pydantic.ConfigDict(extra="allow")
    type: str
    lane: list[str | None]
    conversation_id: str
    message_id: str
    text: str
    ts: str
    cursor: int | None = None


@dataclasses.dataclass(slots=True)
class DeltaData:
    type: str
    lane: list[str | None]
    conversation_id: str
    run_id: str
    message_id: str
    text: str
    ts: str
    reply: str | None = None
    cursor: int | None = None


@dataclasses.dataclass(slots=True)
class CompleteData:
    type: str
    lane: list[str | None]
    conversation_id: str
    message_id: str
    text: str
    ts: str
    run_id: str | None = None
    role: str | None = None
    kind: str | None = None
    reply: str | None = None
    reasoning: str | None = None
    client_id: str | None = None
    cursor: int | None = None


def _edge_encode(event: Json) -> None:
    for codec in (PHEBY, IRIS):
        frame = codec.encode_event(event)
        if frame is not None:
            dumps_clean(frame)


def paths(kind: str, event: Json) -> dict[str, tuple[Callable[[], Any], Callable[[], Any]]]:
    """Per representation: (plugin half, edge half) as zero-argument callables."""
    fields = dict(event)
    wire = dumps_clean(event)[0]
    model: type[pydantic.BaseModel] = DeltaModel if kind == "message.delta" else CompleteModel
    data: Any = DeltaData if kind == "message.delta" else CompleteData
    data_fields = {f.name for f in dataclasses.fields(data)}
    known = {k: v for k, v in fields.items() if k in data_fields}

    def typeddict_plugin() -> None:
        dumps_clean({**fields})  # a dict literal: what building a TypedDict is

    def typeddict_edge() -> None:
        _edge_encode(json.loads(wire))

    def pydantic_plugin() -> None:
        dumps_clean(model(**fields).model_dump(exclude_none=True))

    def pydantic_edge() -> None:
        _edge_encode(model.model_validate(json.loads(wire)).model_dump(exclude_none=True))

    def dataclass_plugin() -> None:
        dumps_clean(dataclasses.asdict(data(**known)))

    def dataclass_edge() -> None:
        parsed = json.loads(wire)
        _edge_encode(dataclasses.asdict(data(**{k: parsed[k] for k in data_fields if k in parsed})))

    return {
        "typeddict": (typeddict_plugin, typeddict_edge),
        "pydantic": (pydantic_plugin, pydantic_edge),
        "dataclass": (dataclass_plugin, dataclass_edge),
    }


def per_event_us(fn: Callable[[], Any], number: int) -> float:
    return min(timeit.repeat(fn, number=number, repeat=5)) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--name")
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    opts = parser.parse_args()
    run = begin()
    number = 2_000 if opts.quick else 20_000
    figures: dict[str, dict[str, Json]] = {}
    for kind, event in sample_events().items():
        figures[kind] = {}
        for representation, (plugin, edge) in paths(kind, event).items():
            plugin_us, edge_us = per_event_us(plugin, number), per_event_us(edge, number)
            figures[kind][representation] = {
                "plugin_us": round(plugin_us, 2),
                "edge_us": round(edge_us, 2),
                "total_us": round(plugin_us + edge_us, 2),
            }
            print(
                f"{kind:17} {representation:10} plugin {plugin_us:6.2f} µs"
                f"  edge {edge_us:6.2f} µs  total {plugin_us + edge_us:6.2f} µs"
            )
    write_timed_result(
        opts.out,
        result_name(opts.name, opts.quick, "model_cost"),
        {
            "benchmark": "model_cost",
            "method": {"number": number, "timer": "timeit, best of 5 repeats"},
            "per_event": figures,
        },
        run,
        [
            figure("cost_per_event", value, "µs", event=kind, representation=rep, side=side)
            for kind, by_rep in figures.items()
            for rep, sides in by_rep.items()
            for side, value in sides.items()
        ],
    )


if __name__ == "__main__":
    main()
