"""Benchmark gateway_plugin.channels.search on a large state.db made by Hermes' own SessionDB.

    .venv/bin/python bench/search_bench.py [--messages 100000] [--sessions 50] [--queries 200]

SessionDB creates the real schema (tables, FTS5 tables, triggers) and the sessions; the
messages go in with one bulk INSERT so Hermes' triggers fill both FTS indexes exactly as
they do in production. Prints median/p95 per scope and writes ``--out`` (else
bench/results/local/search.json), a result file of ``bench.results``.
"""

from __future__ import annotations

import argparse
import random
import sqlite3
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hermes_state import SessionDB  # the bench may import Hermes; gateway_plugin modules never do

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: bench.*

from bench import results as result_files
from gateway_plugin.channels.search import SearchIndex

COMMON = (
    "the a to and of is in it you that for on with this be are can have not what how "
    "please thanks deploy server build test error file code run update config model time"
).split()
CJK = "你好世界今天天气很好我们需要部署服务器测试错误文件代码运行更新配置模型时间问题"
SEED = 7


def _vocabulary(rng: random.Random, size: int) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = {"".join(rng.choices(letters, k=rng.randint(4, 10))) for _ in range(size * 2)}
    return COMMON + sorted(words)[:size]


def _zipf_weights(n: int) -> list[float]:
    return [1.0 / (rank + 1) for rank in range(n)]


def _message(rng: random.Random, vocab: list[str], weights: list[float]) -> str:
    words = rng.choices(vocab, weights=weights, k=rng.randint(5, 60))
    if rng.random() < 0.05:
        start = rng.randrange(len(CJK) - 8)
        words.insert(rng.randrange(len(words)), CJK[start : start + rng.randint(4, 8)])
    return " ".join(words)


def build(db_path: Path, messages: int, sessions: int) -> dict[str, Any]:
    rng = random.Random(SEED)
    started = time.perf_counter()
    db = SessionDB(db_path=db_path)
    chats = ["android:default"] + [f"android:chan_{n}" for n in range(1, 10)]
    lanes: list[tuple[str, str, str | None]] = []
    for n in range(sessions):
        chat = chats[n % len(chats)]
        thread = f"t_{n}" if chat == "android:default" and n % 3 else None
        sid = f"bench_{n:03d}"
        key = f"agent:main:android:dm:{chat}" + (f":{thread}" if thread else "")
        db.create_session(
            sid, "android", chat_id=chat, thread_id=thread, chat_type="dm", session_key=key
        )
        lanes.append((sid, chat, thread))
    db.close()

    vocab = _vocabulary(rng, 5000)
    weights = _zipf_weights(len(vocab))
    t0 = 1_767_225_600.0
    rows = [
        (
            lanes[i % len(lanes)][0],
            "user" if i % 2 == 0 else "assistant",
            _message(rng, vocab, weights),
            t0 + i,
        )
        for i in range(messages)
    ]
    conn = sqlite3.connect(db_path)
    with conn:
        conn.executemany(
            "INSERT INTO messages (session_id, role, content, timestamp) VALUES (?, ?, ?, ?)",
            rows,
        )
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    return {
        "build_seconds": round(time.perf_counter() - started, 2),
        "db_bytes": db_path.stat().st_size,
        "chats": chats,
        "vocab": vocab,
        "weights": weights,
    }


def make_queries(count: int, vocab: list[str], weights: list[float]) -> list[tuple[str, str]]:
    """(kind, query) pairs: Zipf-sampled words (so common words occur), pairs, substrings
    that miss the word index and fall back to trigram, and CJK fragments."""
    rng = random.Random(SEED + 1)
    queries: list[tuple[str, str]] = []
    for i in range(count):
        slot = i % 10
        if slot < 5:
            queries.append(("one_word", rng.choices(vocab, weights=weights)[0]))
        elif slot < 8:
            pair = rng.choices(vocab, weights=weights, k=2)
            queries.append(("two_words", " ".join(pair)))
        elif slot < 9:
            word = rng.choice(vocab[len(COMMON) :])
            queries.append(("substring", word[1:-1]))
        else:
            start = rng.randrange(len(CJK) - 4)
            queries.append(("cjk", CJK[start : start + rng.randint(2, 4)]))
    return queries


def _stats(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p95 = ordered[max(0, int(round(0.95 * len(ordered))) - 1)]
    return {
        "median_ms": round(statistics.median(ordered), 3),
        "p95_ms": round(p95, 3),
        "mean_ms": round(statistics.fmean(ordered), 3),
        "max_ms": round(ordered[-1], 3),
    }


def run(
    index: SearchIndex, queries: list[tuple[str, str]], chats: list[str], scope: str
) -> dict[str, Any]:
    times: list[float] = []
    by_kind: dict[str, list[float]] = {}
    hits = 0
    for n, (kind, query) in enumerate(queries):
        started = time.perf_counter()
        if scope == "all":
            found = index.search(query, scope="all")
        else:
            found = index.search(query, scope="chat", chat_id=chats[n % len(chats)])
        elapsed = (time.perf_counter() - started) * 1000
        times.append(elapsed)
        by_kind.setdefault(kind, []).append(elapsed)
        hits += len(found)
    return {
        **_stats(times),
        "queries": len(times),
        "mean_hits": round(hits / len(times), 1),
        "by_kind": {k: _stats(v) | {"queries": len(v)} for k, v in sorted(by_kind.items())},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=50)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--out", default=None, help="result file (bench/results/<name>.json)")
    args = parser.parse_args()
    begun = result_files.begin()

    with tempfile.TemporaryDirectory(prefix="search-bench-") as tmp:
        db_path = Path(tmp) / "state.db"
        built = build(db_path, args.messages, args.sessions)
        queries = make_queries(args.queries, built["vocab"], built["weights"])
        index = SearchIndex(db_path)
        index.search("warmup")  # open the connection and touch the indexes once
        results = {scope: run(index, queries, built["chats"], scope) for scope in ("all", "chat")}
        index.close()

    report = {
        "build_seconds": built["build_seconds"],
        "db_bytes": built["db_bytes"],
        "sqlite": sqlite3.sqlite_version,
        "scopes": results,
    }
    out = result_files.out_path(args.out, "search")
    result_files.write(
        out,
        begun,
        bench="search",
        parameters={"messages": args.messages, "sessions": args.sessions, "limit": 50},
        figures=[
            result_files.figure("query", res[key], "ms", scope=scope, stat=key.removesuffix("_ms"))
            for scope, res in results.items()
            for key in ("median_ms", "p95_ms")
        ],
        detail=report,
    )
    for scope, res in results.items():
        print(
            f"scope={scope:<4} queries={res['queries']} median={res['median_ms']:.2f} ms "
            f"p95={res['p95_ms']:.2f} ms max={res['max_ms']:.2f} ms mean_hits={res['mean_hits']}"
        )
        for kind, st in res["by_kind"].items():
            print(f"    {kind:<10} median={st['median_ms']:.2f} ms p95={st['p95_ms']:.2f} ms")
    print(f"build {built['build_seconds']} s, db {built['db_bytes'] / 1e6:.1f} MB -> {out}")


if __name__ == "__main__":
    main()
