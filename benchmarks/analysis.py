"""What one engine's runs mean: exit timings per sample, event latency, the result document."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any

import attrs
from common import Scenario, pct, waves
from raw import Timed

if TYPE_CHECKING:
    from engine_bench import EngineBench

__all__ = ["die_stats", "latency", "result"]


def die_stats(bench: EngineBench, scenario: Scenario, index: int, sample: Timed) -> dict[str, Any]:
    assert bench.events is not None
    prefixes = scenario.prefixes[index] if index < len(scenario.prefixes) else []
    dies = [e for name, e in bench.events.die.items() if any(name.startswith(p) for p in prefixes)]
    kills = [
        k
        for name, ks in bench.events.kills.items()
        if any(name.startswith(p) for p in prefixes)
        for k in ks
        if k.signal in ("15", "SIGTERM")
    ]
    out: dict[str, Any] = {
        "seconds": round(sample.seconds, 4),
        "dies_seen": len(dies),
        **{k: v for k, v in sample.extra.items() if k != "wait_returned_ns"},
    }
    if dies:
        rel = [(e.time_ns - sample.start_ns) / 1e9 for e in dies]
        codes = [e.exit_code for e in dies]
        out.update(
            exit0=codes.count(0),
            exit137=codes.count(137),
            exit_other=len(codes) - codes.count(0) - codes.count(137),
            die_first_s=round(min(rel), 3),
            die_last_s=round(max(rel), 3),
            tail_s=round((sample.end_ns - max(e.time_ns for e in dies)) / 1e9, 3),
            waves=waves(rel),
        )
    if kills:
        rel = [(k.time_ns - sample.start_ns) / 1e9 for k in kills]
        out.update(term_first_s=round(min(rel), 3), term_last_s=round(max(rel), 3))
    return out


def latency(bench: EngineBench) -> dict[str, Any]:
    assert bench.events is not None
    by_group: dict[str, list[float]] = {}
    missing = 0
    for group, names in bench.latency_groups.items():
        for name in names:
            die = bench.events.die.get(name)
            if die is None:
                missing += 1
                continue
            by_group.setdefault(group, []).append((bench.exited_at[name] - die.time_ns) / 1e6)
    every = [v for vs in by_group.values() for v in vs]

    def stats(values: list[float]) -> dict[str, Any]:
        return {
            "n": len(values),
            "median_ms": round(statistics.median(values), 1),
            "p95_ms": round(pct(values, 0.95), 1),
            "min_ms": round(min(values), 1),
            "max_ms": round(max(values), 1),
        }

    floors: dict[str, list[float]] = {}
    for s in bench.scenarios:
        if not s.key.startswith(("raw-kw-", "raw-pod-")):
            continue
        for sample in s.samples:
            for name, returned in sample.extra.get("wait_returned_ns", {}).items():
                if name in bench.events.die:
                    floors.setdefault(s.key, []).append(
                        (returned - bench.events.die[name].time_ns) / 1e6
                    )
    result: dict[str, Any] = {"missing_die_events": missing}
    floor = [v for vs in floors.values() for v in vs]
    if floor:
        result["raw_wait_floor"] = stats(floor)
        result["raw_wait_floor_by_scenario"] = {k: stats(v) for k, v in floors.items()}
    if every:
        result["all"] = stats(every)
        graceful = [v for g, vs in by_group.items() if not g.endswith("-g0") for v in vs]
        if graceful:
            result["grace5"] = stats(graceful)
        result["by_scenario"] = {g: stats(vs) for g, vs in by_group.items()}
    return result


def result(bench: EngineBench) -> dict[str, Any]:
    rows = []
    for s in bench.scenarios:
        samples = [die_stats(bench, s, i, t) for i, t in enumerate(s.samples)]
        seconds = [t.seconds for t in s.samples]
        phases: dict[str, float] = {}
        for key in {k for r in samples for k in r.get("phases", {})}:
            values = [r["phases"][key] for r in samples if key in r.get("phases", {})]
            phases[key] = round(statistics.median(values), 3)
        rows.append(
            {
                "phases_median_s": phases,
                "key": s.key,
                "who": s.who,
                "title": s.title,
                "n": s.n,
                "grace": s.grace,
                "median_s": round(statistics.median(seconds), 4) if seconds else None,
                "min_s": round(min(seconds), 4) if seconds else None,
                "max_s": round(max(seconds), 4) if seconds else None,
                "runs": samples,
                "errors": s.errors,
            }
        )
    return {
        "meta": bench.meta,
        "config": attrs.asdict(bench.config),
        "scenarios": rows,
        "event_latency": latency(bench) if bench.events else {},
        "rss": bench.rss,
    }
