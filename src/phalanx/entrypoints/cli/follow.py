"""Following a job: phase transitions as they happen, and its replicas' logs, interleaved.

Waiting is driven by the store's change feed (any write wakes us) with a short poll for log files, which
are written by the replicas, not through the store.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from phalanx.core.lifecycle import ACTIVE_PHASES
from phalanx.entrypoints.cli.render import PHASE_STYLE, styled_phase
from phalanx.entrypoints.client import Client
from phalanx.model.jobs import Phase, TrainingJob

LOG_POLL_SECONDS = 0.1
ROLE_COLOURS = ("cyan", "magenta", "green", "yellow", "blue", "red")


def phase_label(phase: str, width: int = 12) -> str:
    """The phase padded to a column, then coloured (markup must not count towards the width)."""
    style = PHASE_STYLE.get(Phase(phase), "")
    padded = phase.ljust(width)
    return f"[{style}]{padded}[/]" if style else padded


@dataclass
class LogTailer:
    """Reads new complete lines from each replica's latest log file."""

    offsets: dict[Path, int] = field(default_factory=dict)
    partial: dict[Path, bytes] = field(default_factory=dict)

    def read(self, files: list[tuple[str, Path]]) -> list[tuple[str, str]]:
        """New (replica, line) pairs since the last call."""
        lines: list[tuple[str, str]] = []
        for replica, path in files:
            try:
                with open(path, "rb") as handle:
                    handle.seek(self.offsets.get(path, 0))
                    chunk = handle.read()
            except OSError:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(chunk)
            data = self.partial.pop(path, b"") + chunk
            *complete, rest = data.split(b"\n")
            if rest:
                self.partial[path] = rest
            lines.extend((replica, line.decode(errors="replace")) for line in complete)
        return lines

    def flush(self) -> list[tuple[str, str]]:
        """Unterminated last lines, once the job is over."""
        rest = [(str(path.parent.name), data.decode(errors="replace")) for path, data in self.partial.items() if data]
        self.partial.clear()
        return rest


def follow(
    client: Client,
    name: str,
    console: Console,
    *,
    show_logs: bool = True,
    show_phases: bool = True,
    until_finished: bool = True,
) -> TrainingJob:
    """Print phase changes and logs until the job finishes (or is halted); return the final job."""
    started = time.monotonic()
    started_wall = time.time()
    seen: set[tuple[str, str]] = set()
    said_waiting = ""
    tailer = LogTailer()
    colours: dict[str, str] = {}
    status_line = console.status("", spinner="dots") if console.is_terminal and show_phases else None
    if status_line is not None:
        status_line.start()
    try:
        while True:
            seq = client.store.latest_seq()
            job = client.get(name)
            phase = Phase(job.status.phase)
            if show_logs:
                for replica, line in tailer.read(client.ops.log_files(job.metadata.namespace, name)):
                    colour = colours.setdefault(replica, ROLE_COLOURS[len(colours) % len(ROLE_COLOURS)])
                    console.print(f"[{colour}]{replica:>10}[/] | {escape(line)}", highlight=False)
            if show_phases:
                # Every condition records when its phase was last entered; a phase passed through between
                # two looks is still printed, in order.
                for condition in sorted(job.status.conditions, key=lambda c: c.last_transition_time):
                    key = (condition.type, condition.last_transition_time.isoformat())
                    if key in seen:
                        continue
                    seen.add(key)
                    elapsed = max(0.0, (condition.last_transition_time.timestamp() - started_wall))
                    detail = condition.message or condition.reason
                    console.print(
                        f"[dim]{elapsed:7.2f}s[/]  {phase_label(condition.type)} {escape(detail)}",
                        highlight=False,
                    )
                if phase == Phase.QUEUED and job.status.reason == "Waiting" and job.status.message != said_waiting:
                    # Why it waits is not a phase change; say it whenever the scheduler's sentence changes.
                    said_waiting = job.status.message
                    elapsed = time.monotonic() - started
                    console.print(f"[dim]{elapsed:7.2f}s[/]  {phase_label('Queued')} {escape(said_waiting)}")
            if status_line is not None:
                status_line.update(f"{styled_phase(phase)}  {time.monotonic() - started:.1f}s")
            finished = phase not in ACTIVE_PHASES or phase == Phase.HALTED
            if finished or not until_finished:
                if show_logs:
                    for replica, line in tailer.read(client.ops.log_files(job.metadata.namespace, name)):
                        console.print(f"{replica:>10} | {escape(line)}", highlight=False)
                return job
            client.store.wait_for_change(seq, LOG_POLL_SECONDS)
    finally:
        if status_line is not None:
            status_line.stop()
