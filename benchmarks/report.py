"""The targets the figures are held to, and the table printed for one engine."""

from __future__ import annotations

import statistics
from typing import Any

from common import DRAIN_S, GRACE


def _row(result: dict[str, Any], key: str) -> dict[str, Any] | None:
    for row in result["scenarios"]:
        if row["key"] == key and row["median_s"] is not None:
            return dict(row)
    return None


def targets(result: dict[str, Any], cli: dict[str, Any]) -> list[dict[str, Any]]:
    """Every target: measured, reference, ratio, limit, pass/miss (None: not measurable)."""
    out: list[dict[str, Any]] = []

    planned = {row["key"] for row in result["scenarios"]}

    peer = result["meta"].get("peer", {})

    def ratio_target(
        name: str, mine: str, ref: str, limit: float, rule: str, *, faster: bool
    ) -> None:
        if mine not in planned:
            return  # not in this configuration (--quick)
        a, b = _row(result, mine), _row(result, ref)
        entry: dict[str, Any] = {"target": name, "limit": limit, "rule": rule}
        if a is None or b is None:
            missing = mine if a is None else ref
            why = f"no {missing} figure"
            if missing.startswith("peer") and not peer.get("available"):
                why += f" (peer missing: {peer.get('reason')})"
            entry.update(ok=None, why=why)
        else:
            ratio = b["median_s"] / a["median_s"] if faster else a["median_s"] / b["median_s"]
            entry.update(measured=a["median_s"], reference=b["median_s"], ratio=ratio)
            entry["ok"] = ratio >= limit if faster else ratio <= limit
        out.append(entry)

    for n in (1, 8, 32):
        ratio_target(
            f"delete N={n} vs raw-concurrent",
            f"ad-delete-{n}-g5",
            f"raw-conc-{n}",
            1.03 if n <= 8 else 1.05,
            f"asyncdeploy/raw <= {1.03 if n <= 8 else 1.05}x",
            faster=False,
        )
    for n in (8, 32):
        ratio_target(
            f"grace 0 N={n}: ≥1.3x faster than the peer",
            f"ad-delete-{n}-g0",
            f"peer-delete-{n}-g0",
            1.3,
            "peer/asyncdeploy >= 1.3x",
            faster=True,
        )
    for w, c in ((5, 3), (20, 3)):
        ratio_target(
            f"delete-all {w}x{c} vs one workload of {w * c}",
            f"ad-delete-all-{w}x{c}",
            f"ad-delete-{w * c}-g5",
            1.1,
            "delete-all/one workload <= 1.1x",
            faster=False,
        )
        ratio_target(
            f"delete-all {w}x{c} vs the raw floor ({w} pods by hand)",
            f"ad-delete-all-{w}x{c}",
            f"raw-pods-{w}x{c}",
            1.05,
            "delete-all/raw-pods <= 1.05x",
            faster=False,
        )
    lat = result.get("event_latency", {}).get("all")
    out.append(
        {
            "target": "event latency die → ContainerExited, median",
            "limit": 50.0,
            "rule": "<= 50 ms",
            "measured": lat["median_ms"] if lat else None,
            "p95": lat["p95_ms"] if lat else None,
            "ok": (lat["median_ms"] <= 50.0) if lat else None,
        }
    )
    for label, figures in cli.items():
        if "--help" in label:
            out.append(
                {
                    "target": f"{label} cold start, median",
                    "limit": 250.0,
                    "rule": "<= 250 ms",
                    "measured": figures["median_ms"],
                    "ok": figures["median_ms"] <= 250.0,
                }
            )
    rss = result.get("rss") or {}
    hwm = rss.get("vmhwm_kb")
    out.append(
        {
            "target": f"peak RSS, delete-all of {rss.get('run_containers', '?')} containers",
            "limit": 120.0,
            "rule": "<= 120 MB (10^6 B)",
            "measured": round(hwm * 1024 / 1e6, 1) if hwm else None,
            "ok": (hwm * 1024 / 1e6 <= 120.0) if hwm else None,
            **({"why": rss["error"]} if "error" in rss else {}),
        }
    )
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(result: dict[str, Any], cli: dict[str, Any], target_list: list[dict[str, Any]]) -> str:
    meta = result["meta"]
    title = (
        f"=== {meta['engine']} {meta.get('version')} (API {meta.get('api_version')}) at "
        f"{meta['url']} — median of {result['config']['runs']} run(s), drain {DRAIN_S} s, "
        f"grace {GRACE} unless 0; {meta.get('seconds', '?')} s ==="
    )
    lines = ["", title]
    peer = meta.get("peer", {})
    if peer.get("available"):
        lines.append(
            f"peer: gpustack-runtime {peer.get('gpustack_runtime')} (docker-py "
            f"{peer.get('docker_py')}, podman-py {peer.get('podman_py')}), shims: "
            + ("; ".join(peer.get("shims") or []) or "none")
        )
    else:
        lines.append(f"peer: MISSING — {peer.get('reason', '?')}")
    lines.append(
        "load average at start/end: "
        + " / ".join(
            ", ".join(f"{x:.1f}" for x in meta.get(k, ()))
            for k in ("loadavg_at_start", "loadavg_at_end")
        )
        + f" (2 CPUs); {meta.get('other_running_containers_at_start', 0)} other running "
        "container(s) on the engine at the start"
    )
    header = (
        f"{'scenario':<44} {'N':>3} {'g':>2} {'median s':>9} {'min-max':>13} "
        f"{'exit 0/137/x':>12} {'die first-last':>15} {'tail s':>7} {'waves':>5}  vs"
    )
    lines += [header, "-" * len(header)]
    raw_conc = {r["n"]: r for r in result["scenarios"] if r["key"].startswith("raw-conc-")}
    raw_pod = {r["n"]: r for r in result["scenarios"] if r["key"].startswith("raw-pod-")}
    singles = {
        r["n"]: r
        for r in result["scenarios"]
        if r["key"].startswith("ad-delete-") and "g5" in r["key"]
    }
    peers_g0 = {
        r["n"]: r
        for r in result["scenarios"]
        if r["key"].startswith("peer-delete-") and r["grace"] == 0
    }
    for row in sorted(result["scenarios"], key=_order):
        runs = row["runs"]
        exits = (
            "{}/{}/{}".format(
                sum(r.get("exit0", 0) for r in runs),
                sum(r.get("exit137", 0) for r in runs),
                sum(r.get("exit_other", 0) for r in runs)
                + sum(row["n"] - r["dies_seen"] for r in runs),
            )
            if runs
            else "-"
        )
        firsts = [r["die_first_s"] for r in runs if "die_first_s" in r]
        lasts = [r["die_last_s"] for r in runs if "die_last_s" in r]
        tails = [r["tail_s"] for r in runs if "tail_s" in r]
        waves = [r["waves"] for r in runs if "waves" in r]
        die = f"{statistics.median(firsts):.2f}-{statistics.median(lasts):.2f}" if firsts else "-"
        vs = ""
        median = row["median_s"]
        if median is not None:
            ref = None
            if row["key"].startswith("ad-delete-all-"):
                ref = singles.get(row["n"])
                label = "one workload"
                floor = _row(result, row["key"].replace("ad-delete-all-", "raw-pods-"))
                if floor is not None and floor["median_s"]:
                    vs = f"{median / floor['median_s']:.3f}x raw-pods, "
            elif row["who"] == "asyncdeploy" and row["grace"] == 0:
                ref = peers_g0.get(row["n"])
                label = "peer"
            elif row["grace"] == GRACE and (
                row["who"] != "raw" or row["key"].startswith(("raw-kw", "raw-pod"))
            ):
                ref = raw_conc.get(row["n"])
                label = "raw-conc"
            if ref is not None and ref["median_s"]:
                vs += f"{median / ref['median_s']:.3f}x {label}"
            pod = raw_pod.get(row["n"])
            if row["who"] != "raw" and row["grace"] == GRACE and pod and pod["median_s"]:
                vs += f", {median / pod['median_s']:.3f}x raw-pod"
        minmax = f"{_fmt(row['min_s'], 2)}-{_fmt(row['max_s'], 2)}"
        lines.append(
            f"{row['title']:<44} {row['n']:>3} {row['grace']:>2} {_fmt(median):>9} {minmax:>13} "
            f"{exits:>12} {die:>15} "
            f"{_fmt(statistics.median(tails) if tails else None, 2):>7} "
            f"{(max(waves) if waves else '-')!s:>5}  {vs}"
        )
        for error in row["errors"]:
            lines.append(f"    ! {error[:160]}")
    if not any(r["key"].startswith("raw-serial-32") for r in result["scenarios"]):
        lines.append("(raw-serial N=32 skipped: ~70 s a run, 32 x (drain + rm))")
    lines += _phase_lines(result)
    lines += _latency_lines(result.get("event_latency", {}))
    rss = result.get("rss") or {}
    if "vmhwm_kb" in rss:
        lines.append(
            f"peak RSS: VmHWM {rss['vmhwm_kb'] * 1024 / 1e6:.1f} MB for one delete-all of "
            f"{rss['run_containers']} run containers in {rss['workloads']} workloads "
            f"({rss['seconds']:.2f} s; after imports {rss['vmrss_imported_kb'] * 1024 / 1e6:.1f} MB)"
        )
    elif rss:
        lines.append(f"peak RSS: FAILED {rss.get('error')}")
    for label, figures in cli.items():
        lines.append(
            f"{label}: median {figures['median_ms']} ms (min {figures['min_ms']}, max "
            f"{figures['max_ms']}, {figures['runs']} runs)"
        )
    lines += ["", "targets:"]
    for t in target_list:
        mark = {True: "PASS", False: "MISS", None: "n/a "}[t.get("ok")]
        if "ratio" in t:
            figure = (
                f"{t['measured']:.3f} s vs {t['reference']:.3f} s → {t['ratio']:.3f}x ({t['rule']})"
            )
        elif t.get("measured") is not None:
            figure = f"{t['measured']} ({t['rule']})" + (
                f", p95 {t['p95']} ms" if t.get("p95") is not None else ""
            )
        else:
            figure = t.get("why", "not measured")
        lines.append(f"  [{mark}] {t['target']:<52} {figure}")
    return "\n".join(lines)


_PHASES = (
    ("started_first", "DrainStarted"),
    ("signal_first", "TERM first"),
    ("signal_last", "TERM last"),
    ("exited_first", "exit first"),
    ("exited_last", "exit last"),
    ("removed_last", "run rm last"),
    ("pause_removed_last", "pause rm"),
    ("finished_last", "finished"),
)


def _phase_lines(result: dict[str, Any]) -> list[str]:
    """When each step of asyncdeploy's drains reached the consumer (s from the call, medians)."""
    rows = [r for r in sorted(result["scenarios"], key=_order) if r["who"] == "asyncdeploy"]
    if not rows:
        return []
    header = f"{'asyncdeploy steps, s from the call (median)':<44} {'N':>3} {'g':>2} " + " ".join(
        f"{label:>12}" for _, label in _PHASES
    )
    lines = ["", header]
    for row in rows:
        phases = row.get("phases_median_s") or {}
        lines.append(
            f"{row['title']:<44} {row['n']:>3} {row['grace']:>2} "
            + " ".join(f"{_fmt(phases.get(key)):>12}" for key, _ in _PHASES)
        )
    lines.append("")
    return lines


def _latency_lines(lat: dict[str, Any]) -> list[str]:
    """Event latency per scenario, next to the raw floor (the raw baselines' own wait())."""
    if not lat.get("all"):
        return []
    lines = [
        (
            "event latency, ms: engine die event (timeNano) → ContainerExited at the consumer "
            f"({lat['missing_die_events']} exits without a die event)"
        ),
        f"  {'':<38} {'n':>4} {'median':>7} {'p95':>7} {'max':>7}",
    ]

    def line(label: str, st: dict[str, Any]) -> str:
        return (
            f"  {label:<38} {st['n']:>4} {st['median_ms']:>7.1f} {st['p95_ms']:>7.1f} "
            f"{st['max_ms']:>7.1f}"
        )

    for key, st in lat.get("by_scenario", {}).items():
        lines.append(line(key, st))
    lines.append(line("asyncdeploy, all", lat["all"]))
    for key, st in lat.get("raw_wait_floor_by_scenario", {}).items():
        lines.append(line(f"floor: {key} wait() return", st))
    if lat.get("raw_wait_floor"):
        lines.append(line("floor: raw wait() return, all", lat["raw_wait_floor"]))
    return lines


_WHO = {"raw": 0, "asyncdeploy": 1, "peer": 2}


def _order(row: dict[str, Any]) -> tuple[int, int, int, int, str]:
    delete_all = 1 if "delete-all" in row["key"] or row["key"].startswith("raw-pods") else 0
    serial = 1 if "serial" in row["key"] else 0
    return (serial, delete_all, -row["grace"], row["n"], f"{_WHO[row['who']]}{row['key']}")


# --- main ----------------------------------------------------------------------------------
