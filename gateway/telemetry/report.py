"""`gateway report`: an HTML page with PNG charts of the retry telemetry in the lake.

Reads the lake with deltalake/pyarrow (no Spark) and writes `index.html` plus one PNG per chart:
deliveries per message by group, time to commit, observed retry intervals against a policy's
table, dead letters and discards over time, and one message's timeline.

Run `python -m gateway.telemetry.report --table DIR --out DIR [--expected NAME=10s,30s,...]`;
`--group G` reports on one group only, `--since T` on the messages first seen at or after T.
"""

from __future__ import annotations

import argparse
import html
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gateway.errors import GatewayError, InvalidArgument, NotFound
from gateway.telemetry import analysis, charts
from gateway.telemetry.lake import read_lake

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Chart:
    file: str
    title: str
    note: str


def build_report(
    rows: Sequence[Mapping[str, Any]],
    out: Path,
    *,
    expected: Mapping[str, Sequence[int]] | None = None,
    message: tuple[str, str] | None = None,
    time_scale: float = 1.0,
    scope: Mapping[str, str] | None = None,
) -> Path:
    """Write the charts and `index.html` for `rows` into `out`; returns the page's path.
    `expected`: retry tables by dialect, drawn against the retry intervals observed.
    `time_scale`: the gateway's `--time-scale`; times are shown as the policies saw them.
    `scope`: how `rows` were chosen (`select`), shown first in the summary."""
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        allowed = f"a directory that can be made ({exc.strerror})"
        raise InvalidArgument("out", str(out), allowed) from exc
    tables: dict[str, Sequence[int]] = dict(expected or {})
    rows = analysis.rescale(rows, time_scale)
    messages = analysis.by_message(rows)
    intervals = analysis.retry_intervals(messages)
    terminal = analysis.terminal_events(rows)
    key = _pick_message(messages, message, "reported on" if scope else "in the lake")
    slack = math.ceil(1 / time_scale)
    figures = analysis.policy_figures(rows, messages, intervals, slack)

    charts.attempts_chart(out / "attempts.png", analysis.attempts_by_group(messages))
    charts.commit_time_chart(out / "time_to_commit.png", analysis.time_to_commit_ms(messages))
    charts.retry_interval_chart(out / "retry_intervals.png", intervals, tables)
    charts.terminal_chart(out / "terminal.png", terminal)
    label = f"{key[1]} ({key[0]})" if key else "-"
    charts.timeline_chart(
        out / "timeline.png", label, analysis.timeline(messages[key]) if key else [],
        scaled=time_scale != 1,
    )

    shown = [
        Chart("attempts.png", "Deliveries per message", "How many deliveries each message needed."),
        Chart("time_to_commit.png", "Time to commit",
              "From a message's first event (published) to COMMITTED."),
        Chart(
            "retry_intervals.png",
            "Retry intervals",
            "For each retry: the wait its policy set, when it fell due (WAITING_RETRY to READY) "
            "and when it was delivered again, measured from the failure; against the policy's "
            "table where it has one (retry k waits entry k; past the end, the last entry).",
        ),
        Chart("terminal.png", "Dead letters and discards", "Terminal failures over time."),
        Chart("timeline.png", "One message", f"Every transition of message {label}."),
    ]
    summary: dict[str, object] = {
        **(scope or {}),
        "events": len(rows),
        "messages": len(messages),
        "groups": len({k[0] for k in messages}),
        "policies": ", ".join(sorted({str(r["dialect"]) for r in rows})) or "-",
        "retries observed": len(intervals),
        "dead-lettered": len(terminal["DEAD_LETTERED"]),
        "discarded": len(terminal["DISCARDED"]),
    }
    if time_scale != 1:
        summary["time scale"] = f"{time_scale:g} (times shown as the policies saw them)"
    notes = []
    hint = analysis.scale_hint(intervals) if time_scale == 1 else None
    if hint is not None:
        notes.append(f"Retries fell due after about {hint:.2g} of their planned waits: was the "
                     f"gateway run with --time-scale {hint:.2g}? Pass the same --time-scale to "
                     "gateway report to see the times as the policies saw them.")
    page = out / "index.html"
    page.write_text(_html(summary, figures, notes, shown), encoding="utf-8")
    return page


def select(
    rows: Sequence[Mapping[str, Any]], *, group: str = "", since_ms: int | None = None
) -> list[Mapping[str, Any]]:
    """The rows of `group` (all when ""), of the messages whose first row is at or after
    `since_ms` (all when None), each such message with every row of its own (a retry's
    history cut at `since_ms` would show a wrong time to commit). A group the lake does not
    hold is refused (NotFound, naming the groups it holds)."""
    if group:
        groups = {str(r["group"]) for r in rows}
        if group not in groups:
            held = ", ".join(repr(g) for g in sorted(groups)[:10]) or "none"
            more = f" and {len(groups) - 10} more" if len(groups) > 10 else ""
            raise NotFound(f"group {group!r} is not in the lake (its groups: {held}{more})")
        rows = [r for r in rows if r["group"] == group]
    if since_ms is None:
        return list(rows)
    first: dict[analysis.MessageKey, int] = {}
    for r in rows:
        key, ts = (str(r["group"]), str(r["message_id"])), int(r["ts_ms"])
        first[key] = min(first.get(key, ts), ts)
    return [r for r in rows if first[(str(r["group"]), str(r["message_id"]))] >= since_ms]


def parse_since(text: str, now_ms: int) -> int:
    """`--since`: an ISO 8601 time (UTC when it names no zone) or a duration back from
    `now_ms` (`30m`, `2h`, `7d`); epoch milliseconds."""
    try:
        return now_ms - analysis.parse_duration_ms(text)
    except InvalidArgument:
        pass
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidArgument("since", text, "an ISO 8601 time (2026-01-01T10:00:00Z; UTC when "
                              "no zone is given) or a duration back from now (30m, 2h, 7d)"
                              ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return round(at.timestamp() * 1000)


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="seconds")


def _pick_message(
    messages: Mapping[analysis.MessageKey, Sequence[Mapping[str, Any]]],
    wanted: tuple[str, str] | None,
    where: str = "in the lake",
) -> analysis.MessageKey | None:
    """The requested (group, message id) -- any group when group is "" -- or the busiest one."""
    if wanted is None:
        return analysis.busiest_message(messages)
    group, message_id = wanted
    for key in sorted(messages):
        if key[1] == message_id and (not group or key[0] == group):
            return key
    raise NotFound(f"message {message_id!r} (group {group or 'any'!r}) is not {where}")


def _html(
    summary: Mapping[str, object], figures: Sequence[analysis.PolicyFigures],
    notes: Sequence[str], shown: Sequence[Chart],
) -> str:
    e = html.escape
    rows = "\n".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in summary.items())
    heads = ("policy", "retries observed", "due as planned", "dead-lettered", "discarded",
             "messages", "median delivery lag")
    per_policy = "\n".join(
        f"<tr><td>{e(f.policy)}</td><td>{f.retries}</td><td>{f.as_planned}</td>"
        f"<td>{f.dead_lettered}</td><td>{f.discarded}</td><td>{f.messages}</td>"
        f"<td>{'-' if f.median_lag_ms is None else e(_seconds(f.median_lag_ms))}</td></tr>"
        for f in figures
    )
    notes_html = "".join(f'<p class="note">{e(n)}</p>' for n in notes)
    sections = "\n".join(
        f"<section><h2>{e(c.title)}</h2><p>{e(c.note)}</p>"
        f'<img src="{e(c.file)}" alt="{e(c.title)}"></section>'
        for c in shown
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Retry telemetry</title>
<style>body{{font-family:sans-serif;max-width:960px;margin:2em auto}}
th{{text-align:left;padding-right:1em}}td{{padding-right:1em}}img{{max-width:100%}}
.note{{background:#fff3cd;padding:.5em}}</style></head>
<body><h1>Retry telemetry</h1>
{notes_html}
<table>{rows}</table>
<h2>By policy</h2>
<table class="policies"><tr>{"".join(f"<th>{e(h)}</th>" for h in heads)}</tr>
{per_policy}
</table>
{sections}
</body></html>
"""


def _seconds(ms: int) -> str:
    return f"{ms / 1000:.3g} s"


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="gateway report", description="Write an HTML report of the retry telemetry lake."
    )
    p.add_argument("--table", required=True, help="lake table directory (Delta or Parquet)")
    p.add_argument("--out", required=True, help="directory for index.html and the charts")
    p.add_argument(
        "--expected",
        action="append",
        default=[],
        metavar="NAME=DELAYS",
        help="a dialect's retry table, e.g. NAME=10s,30s,1m (repeatable; overrides built-ins)",
    )
    p.add_argument("--group", default="",
                   help="report on this group only (and draw the timeline of its busiest "
                        "message, or of --message); a group the lake does not hold exits 2")
    p.add_argument("--message", default="",
                   help="message id whose timeline is drawn (of --group; any group without it)")
    p.add_argument("--since", default=None, metavar="TIME",
                   help="report on the messages first seen at or after TIME, an ISO 8601 time "
                        "(UTC when no zone is given) or a duration back from now (30m, 2h, 7d)")
    p.add_argument("--log-level", default=None,
                   help="debug, info (default), warning or error; also GATEWAY_LOG_LEVEL")
    p.add_argument("--time-scale", type=float, default=1.0,
                   help="the --time-scale the gateway ran with: show times as the policies saw "
                        "them (default 1)")
    return p.parse_args(argv)


def main(
    argv: Sequence[str] | None = None, tables: Mapping[str, Sequence[int]] | None = None,
    now_ms: int | None = None,
) -> int:
    """CLI entry point; returns the process exit code. `tables`: the built-in retry tables by
    dialect (the registry's `retry_tables`), which `--expected` overrides. `now_ms`: the time
    a `--since` duration counts back from (default: the wall clock)."""
    from gateway import logs

    args = _parse(argv)
    try:
        logs.configure(logs.level_from(args.log_level))
        expected: dict[str, Sequence[int]] = dict(tables or {})
        expected.update(analysis.parse_expected(spec) for spec in args.expected)
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        since_ms = parse_since(args.since, now) if args.since is not None else None
        rows = select(read_lake(args.table).to_pylist(), group=args.group, since_ms=since_ms)
        scope = {"group": args.group} if args.group else {}
        if since_ms is not None:
            scope["messages first seen since"] = _iso(since_ms)
        message = (args.group, args.message) if args.message else None
        page = build_report(rows, Path(args.out), expected=expected, message=message,
                            time_scale=args.time_scale, scope=scope)
    except (GatewayError, OSError) as exc:
        log.error("gateway report: %s", exc.message if isinstance(exc, GatewayError) else exc)
        return 2
    print(page)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
