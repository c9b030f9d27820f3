"""Tables for the dataset and cache verbs: `get datasets`, `describe dataset`, `cache ls`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from phalanx.entrypoints.cli.render import age, events_table
from phalanx.entrypoints.cli.styles import styled_phase
from phalanx.model.datasets import Dataset, DatasetSource
from phalanx.model.masking import mask_url
from phalanx.model.resources import human_memory
from phalanx.services.dataset_views import DatasetDescription, NodeCacheView


def short_version(version: str | None) -> str:
    """``sha256:5f2b9c0d1e2f`` (12 hex digits: enough to tell versions apart on a screen)."""
    return version[:19] if version else "-"


def source_text(source: DatasetSource) -> str:
    """One line naming the source, passwords masked."""
    if source.path is not None:
        return f"path: {source.path}"
    if source.url is not None:
        return f"url: {mask_url(source.url)}"
    if source.sql is not None:
        return f"sql: {source.sql.query} on {mask_url(source.sql.url)}"
    if source.script is not None:
        return "script: " + " ".join(source.script.command)
    assert source.from_job is not None
    return f"fromJob: {source.from_job.job}, output {source.from_job.output}"


def datasets_table(datasets: list[Dataset], *, namespaces: bool = False) -> Table:
    """`phalanx get datasets`."""
    table = Table(box=None, header_style="bold", pad_edge=False)
    columns = ["NAME", "PHASE", "VERSION", "SIZE", "FILES", "NODES", "AGE"]
    for column in ["NAMESPACE", *columns] if namespaces else columns:
        table.add_column(column)
    for dataset in datasets:
        status = dataset.status
        row = [
            dataset.metadata.name,
            styled_phase(status.phase),
            short_version(status.version),
            human_memory(status.bytes) if status.version else "-",
            str(status.files) if status.version else "-",
            str(len(status.nodes)),
            age(dataset.metadata.creation_timestamp),
        ]
        table.add_row(*([dataset.metadata.namespace, *row] if namespaces else row))
    return table


def print_dataset_description(console: Console, described: DatasetDescription) -> None:
    """`phalanx describe dataset NAME`: source, distribution, status, lineage, nodes, the jobs reading it, events."""
    dataset = described.dataset
    spec, status, meta = dataset.spec, dataset.status, dataset.metadata
    files = f"{status.files} file{'' if status.files == 1 else 's'}"
    rows = [
        ("Name", meta.name),
        ("Namespace", meta.namespace),
        ("Source", source_text(spec.source)),
        ("Distribution", str(spec.distribution)),
        ("Cache policy", str(spec.cache.policy)),
        ("Phase", styled_phase(status.phase)),
        ("Version", status.version or "-"),
        ("Size", f"{human_memory(status.bytes)} in {files}" if status.version else "-"),
        ("Lineage", mask_url(status.lineage or "-")),
        ("Message", mask_url(status.message or "-")),
        ("Cached on", ", ".join(status.nodes) or "no node yet"),
        ("Created", f"{meta.creation_timestamp} ({age(meta.creation_timestamp)} ago)"),
    ]
    for label, value in rows:
        console.print(f"[bold]{label + ':':<14}[/] {value}", highlight=False)
    jobs = Table(title="Jobs reading it", box=None, title_justify="left", header_style="bold")
    for column in ("JOB", "PHASE", "AGE"):
        jobs.add_column(column)
    for job in described.jobs:
        jobs.add_row(job.metadata.name, styled_phase(job.status.phase), age(job.metadata.creation_timestamp))
    console.print(jobs if described.jobs else "No job reads it.")
    console.print(events_table(described.events, meta.creation_timestamp))


def print_caches(console: Console, views: list[NodeCacheView]) -> None:
    """`phalanx cache ls`: per node, its capacity and use, its entries and its per-dataset counters."""
    for view in views:
        if view.capacity is None:
            size = "capacity not known here (the node agent keeps the cache on the node)"
        else:
            size = f"{human_memory(view.used or 0)} used of {human_memory(view.capacity)}"
        console.print(f"[bold]node {view.node}[/]: {size}", highlight=False)
        if not view.entries:
            console.print("  (empty)")
        else:
            entries = Table(box=None, header_style="bold", pad_edge=False)
            for column in ("KEY", "DATASET", "SIZE", "STATE", "PINNED BY"):
                entries.add_column(column, overflow="fold")
            for entry in view.entries:
                entries.add_row(
                    entry.key,
                    entry.dataset,
                    human_memory(entry.bytes) if entry.bytes else "-",
                    entry.state,
                    ", ".join(entry.pinned_by) or "-",
                )
            console.print(entries)
        if view.counters:
            console.print()
            counters = Table(box=None, header_style="bold", pad_edge=False)
            for column in ("DATASET", "HITS", "MISSES", "HIT RATIO", "FETCHED", "FROM CACHE", "EVICTIONS"):
                counters.add_column(column)
            for dataset, c in sorted(view.counters.items()):
                counters.add_row(
                    dataset,
                    str(c.hits),
                    str(c.misses),
                    f"{c.hit_ratio:.2f}",
                    human_memory(c.bytes_fetched),
                    human_memory(c.bytes_from_cache),
                    str(c.evictions),
                )
            console.print(counters)
