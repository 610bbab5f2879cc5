"""The markdown tables of a `bench.gpu.report` report."""

import json
from typing import Any


def table(report: dict[str, Any]) -> str:
    lines = [*(f"- {note}" for note in report.get("notes", [])), *([""] if "notes" in report else [])]
    for run in report.get("runs", []):
        command = f" `{run['command']}`" if "command" in run else ""
        lines.append(f"Run {run['run']}:{command} measured {', '.join(run['sections'])}.")
        lines += [f"Run {run['run']} machine: {json.dumps(run['machine'])}"]
        lines += [f"Run {run['run']} {line}" for line in _ceiling_lines(run["ceilings"])] + [""]
    if "runs" not in report:
        lines += [f"Command: `{report['command']}`"] if "command" in report else []
        lines += [f"Machine: {json.dumps(report['machine'])}", "", *_ceiling_lines(report["ceilings"])]
    lines += _embedding_table(report.get("embedding", []))
    lines += _engine_table(report.get("engine", []))
    lines += _batcher_table(report.get("batcher", []))
    lines += _spaces_table(report.get("spaces", []))
    lines += _search_table("faiss flat", report.get("faiss", []))
    lines += _search_table("torch flat search", report.get("torch_flat", []))
    return "\n".join(lines) + "\n"


def _ceiling_lines(ceilings: dict[str, Any]) -> list[str]:
    lines = []
    for device, ceiling in ceilings.items():
        matmuls = [ceiling["matmul"]] + ([ceiling["matmul_float32"]] if "matmul_float32" in ceiling else [])
        described = ", ".join(f"{m['flops_per_s'] / 1e12:.3f} TFLOP/s ({m['dtype']})" for m in matmuls)
        lines.append(
            f"{device} ceilings: matmul {described}, bandwidth {ceiling['bandwidth']['bytes_per_s'] / 1e9:.1f} GB/s"
        )
    return lines


def _embedding_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| model | weights | batch | texts/s | tokens/s | TFLOP/s | of matmul ceiling |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    notes = sorted({row["note"] for row in rows if "note" in row})
    for row in rows:
        if "skipped" in row:
            lines.append(f"| {row['model']} | skipped: {row['skipped']} | | | | | |")
            continue
        weights = row.get("weights", "real") + (" *" if "note" in row else "")
        lines.append(
            f"| {row['model']} | {weights} | {row['batch_size']} | {row['texts_per_s']:,.0f} "
            f"| {row['tokens_per_s']:,.0f} | {row['flops_per_s'] / 1e12:.3f} | {row['fraction_of_matmul']:.3f} |"
        )
    return lines + [f"\n\\* {note}" for note in notes]


def _engine_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| page embedding | model | batch | texts | texts/s | tokens/s |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | |")
            continue
        lines.append(
            f"| {row['path']} | {row['model']} | {row['batch_size']} | {row['texts']:,} "
            f"| {row['texts_per_s']:,.0f} | {row['tokens_per_s']:,.0f} |"
        )
    return lines


def _batcher_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| pooled page embedding | model | batch | texts | texts/s | tokens/s | batches, mean size "
        "| tokenizers pool |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | | | |")
            continue
        path = row["path"] + (" (best)" if row.get("best") else "")
        batches = f"{row['batches']:,}, {row['mean_batch_size']:.1f}" if "batches" in row else ""
        if "max_batch_tokens" in row:
            path += f" ≤{row['max_batch_tokens']:,} tokens, {row['max_wait_ms']:g} ms"
        lines.append(
            f"| {path} | {row['model']} | {row['batch_size']} | {row['texts']:,} | {row['texts_per_s']:,.0f} "
            f"| {row['tokens_per_s']:,.0f} | {batches} | {row.get('parallelism', '')} |"
        )
    return lines


def _spaces_table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        "| Memoryos spaces | turns | written (s) | all searchable (s) | turns/s | batches, mean size "
        "| all found |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        if "skipped" in row:
            lines.append(f"| skipped: {row['skipped']} | | | | | | |")
            continue
        lines.append(
            f"| {row['spaces']} × {row['turns_per_space']} turns, {row['model']} | {row['turns']:,} "
            f"| {row['written_seconds']:.2f} | {row['seconds']:.2f} | {row['turns_per_s']:,.0f} "
            f"| {row['batches']:,}, {row['mean_batch_size']:.1f} | {row['all_found']} |"
        )
    return lines


def _search_table(title: str, rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    lines = [
        "",
        f"| {title} | index | vectors × dim | queries | ms | GB/s scanned | of bandwidth | of matmul |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        lines.append(
            f"| {row['backend']} | {row['index']} | {row['vectors']:,} × {row['dim']} | {row['queries']} "
            f"| {row['seconds'] * 1000:.2f} | {row['bytes_per_s'] / 1e9:.1f} "
            f"| {row['fraction_of_bandwidth']:.3f} | {row['fraction_of_matmul']:.3f} ({row['matmul_ceiling_dtype']}) |"
        )
    return lines
