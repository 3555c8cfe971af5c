"""PNG charts of retry telemetry (matplotlib, Agg backend, no global pyplot state)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from gateway.telemetry.analysis import RetryInterval, expected_delay_ms
from gateway.telemetry.events import STATES

_DPI = 100


def _figure(width: float = 8.0, height: float = 4.5) -> Figure:
    return Figure(figsize=(width, height), dpi=_DPI, layout="constrained")


def _empty(fig: Figure, title: str, what: str) -> None:
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.text(0.5, 0.5, what, ha="center", va="center", transform=ax.transAxes, color="gray")
    ax.set_axis_off()


def attempts_chart(path: Path, by_group: Mapping[str, Counter[int]]) -> None:
    """Grouped bars: messages per number of deliveries, one colour per group."""
    fig = _figure()
    title = "Deliveries per message, by group"
    if not by_group:
        _empty(fig, title, "no messages")
    else:
        ax = fig.add_subplot()
        groups = sorted(by_group)
        xs = sorted({n for c in by_group.values() for n in c})
        width = 0.8 / len(groups)
        for i, group in enumerate(groups):
            offsets = [x - 0.4 + width * (i + 0.5) for x in xs]
            ax.bar(offsets, [by_group[group][x] for x in xs], width=width, label=group)
        ax.set_xticks(xs)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("deliveries of the message (attempts)")
        ax.set_ylabel("messages")
        ax.set_title(title)
        ax.legend(title="group", fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    fig.savefig(path)


def commit_time_chart(path: Path, by_group: Mapping[str, Sequence[int]]) -> None:
    """Histogram of time from a message's first event to its commit, per group."""
    fig = _figure()
    title = "Time to commit"
    if not any(by_group.values()):
        _empty(fig, title, "no committed messages")
    else:
        ax = fig.add_subplot()
        series = {g: [ms / 1000 for ms in v] for g, v in sorted(by_group.items()) if v}
        ax.hist(list(series.values()), bins=30, label=list(series), stacked=True)
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("seconds from first event (published) to COMMITTED")
        ax.set_ylabel("messages")
        ax.set_title(title)
        ax.legend(title="group", fontsize="small")
        ax.grid(axis="y", alpha=0.3)
    fig.savefig(path)


def retry_interval_chart(
    path: Path, intervals: Sequence[RetryInterval], expected: Mapping[str, Sequence[int]]
) -> None:
    """Per policy and retry number: the wait the policy set, when the retry fell due and when it
    was delivered again (from the failure), against the policy's table where it has one."""
    dialects = sorted({i.dialect for i in intervals})
    fig = _figure(8.0, 3.6 * max(1, len(dialects)))
    title = "Retry intervals"
    if not dialects:
        _empty(fig, title, "no retries observed")
        fig.savefig(path)
        return
    axes = fig.subplots(len(dialects), 1, squeeze=False)[:, 0]
    for ax, dialect in zip(axes, dialects, strict=True):
        mine = [i for i in intervals if i.dialect == dialect]
        top = max(i.retry for i in mine)
        table = expected.get(dialect)
        if table:
            ks = list(range(1, top + 1))
            ax.step(ks, [expected_delay_ms(table, k) / 1000 for k in ks], where="mid",
                    color="tab:red", alpha=0.6, label="policy table")
        ax.scatter([i.retry for i in mine], [i.planned_ms / 1000 for i in mine], marker="_",
                   s=400, color="black", label="wait set by the policy")
        ax.scatter([i.retry - 0.12 for i in mine], [max(i.observed_ms, 1) / 1000 for i in mine],
                   s=16, alpha=0.6, color="tab:blue", label="fell due (READY)")
        again = [i for i in mine if i.redelivered_ms is not None]
        ax.scatter([i.retry + 0.12 for i in again],
                   [max(i.redelivered_ms or 0, 1) / 1000 for i in again],
                   s=16, alpha=0.6, color="tab:green", label="delivered again")
        values = [v for i in mine for v in (i.planned_ms, i.observed_ms) if v > 0]
        if values and max(values) > 20 * min(values):
            ax.set_yscale("log")
        else:
            ax.set_ylim(bottom=0)
        ax.set_xlim(0.5, top + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("retry number")
        ax.set_ylabel("seconds after the failure")
        ax.set_title(f"{title}: {dialect} ({len(mine)} retries)")
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3, which="both")
    fig.savefig(path)


def terminal_chart(path: Path, times: Mapping[str, Sequence[int]], buckets: int = 40) -> None:
    """Dead letters and discards per time bucket."""
    fig = _figure()
    title = "Dead letters and discards over time"
    every = [t for ts in times.values() for t in ts]
    if not every:
        _empty(fig, title, "no dead letters or discards")
        fig.savefig(path)
        return
    ax = fig.add_subplot()
    start, end = min(every), max(every)
    width_ms = max(1, (end - start) // buckets + 1)
    edges = [start + i * width_ms for i in range(buckets + 1)]
    for state, ts in sorted(times.items()):
        counts = [0] * buckets
        for t in ts:
            counts[(t - start) // width_ms] += 1
        ax.stairs(counts, [(e - start) / 1000 for e in edges], label=state, linewidth=1.8)
    since = datetime.fromtimestamp(start / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    ax.set_xlabel(f"seconds since {since} (bucket {width_ms / 1000:g} s)")
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylabel("messages per bucket")
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    fig.savefig(path)


def timeline_chart(
    path: Path, label: str, points: Sequence[tuple[int, str, int]], scaled: bool = False
) -> None:
    """One message's states over time, as a step chart; each delivery marked with its
    attempt. `scaled`: the times are policy time (a report with `--time-scale`)."""
    fig = _figure(9.0, 4.0)
    title = f"Timeline of message {label}"
    if not points:
        _empty(fig, title, "no events")
        fig.savefig(path)
        return
    ax = fig.add_subplot()
    t0 = points[0][0]
    xs = [(t - t0) / 1000 for t, _, _ in points]
    ys = [STATES.index(s) for _, s, _ in points]
    ax.step([*xs, xs[-1]], [*ys, ys[-1]], where="post", marker="o", markersize=4)
    for x, (_, state, attempt) in zip(xs, points, strict=True):
        if state == "INFLIGHT":
            ax.annotate(f"#{attempt}", (x, STATES.index(state)), textcoords="offset points",
                        xytext=(3, 5), fontsize="x-small", color="dimgray")
    ax.set_yticks(range(len(STATES)), list(STATES))
    ax.set_ylim(-0.5, len(STATES) - 0.5)
    policy_time = " (policy time)" if scaled else ""
    ax.set_xlabel(f"seconds since the first event of the message{policy_time}; #n: delivery n")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.savefig(path)
