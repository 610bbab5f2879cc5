"""Markdown tables from the benchmark JSON, for docs/benchmarks/ and docs/benchmarks.md."""

from typing import Any


def _ks(row: dict[str, Any]) -> list[str]:
    return sorted(row["recall"]["overall"], key=int)


def markdown(results: dict[str, Any]) -> str:
    lines = [f"Machine: {results['machine']}", ""]
    if results.get("engine"):
        lines += [
            "| stored pages | retrieve p50 / p95 | add_memory p50 / p95 | add until searchable p50 / p95 "
            "| query encode p50 | page encode p50 | bytes/page | LLM calls/turn | open+close |",
            "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
        ]
        for row in results["engine"]["latency"]:
            lines.append(
                f"| {row['pages']:,} | {row['retrieve']['p50_ms']} / {row['retrieve']['p95_ms']} ms "
                f"| {row['add_memory']['p50_ms']} / {row['add_memory']['p95_ms']} ms "
                f"| {row['add_until_searchable']['p50_ms']} / {row['add_until_searchable']['p95_ms']} ms "
                f"| {row['encode_query']['p50_ms']} ms | {row['encode_one']['p50_ms']} ms "
                f"| {row['bytes_per_page']:,} | {row['llm_calls_per_turn']} | {row['open_and_close_s']} s |"
            )
        lines += ["", "| add_memories batch size | turns/s |", "| --- | --- |"]
        lines += [f"| {row['batch_size']} | {row['turns_per_s']} |" for row in results["engine"]["ingest"]]
    if results.get("recall"):
        rows = results["recall"]
        ks = _ks(rows[0])
        lines += [
            "",
            "| conversation | category | questions | " + " | ".join(f"recall@{k}" for k in ks) + " |",
        ]
        lines.append("| --- | --- | --- | " + " | ".join("---" for _ in ks) + " |")
        for row in rows:
            report = row["recall"]
            lines.append(
                f"| {row['sample_id']} | all | {report['question_count']} | "
                + " | ".join(f"{report['overall'][k]:.3f}" for k in ks)
                + " |"
            )
            for category, by_k in sorted(report["by_category"].items(), key=lambda item: int(item[0])):
                count = report["category_counts"][category]
                lines.append(
                    f"| {row['sample_id']} | {category} | {count} | "
                    + " | ".join(f"{by_k[k]:.3f}" for k in ks)
                    + " |"
                )
        mean_at = {k: sum(r["recall"]["overall"][k] for r in rows) / len(rows) for k in ks}
        lines.append("| **mean** | all | | " + " | ".join(f"**{mean_at[k]:.3f}**" for k in ks) + " |")
    return "\n".join(lines) + "\n"


def _latency_cells(row: dict[str, Any]) -> str:
    single, batch_1t, batch_2t = row["single"], row["batch64_1t"], row["batch64_2t"]
    return (
        f"{single['p50_ms']} / {single['p99_ms']} ms | {batch_1t['p50_ms']} / {batch_1t['p99_ms']} ms "
        f"| {batch_2t['p50_ms']} ms"
    )


def index_markdown(results: dict[str, Any]) -> str:
    """The vector-index table for docs/benchmarks/index.md and docs/indexes.md."""
    mb = 1 / 1e6
    lines = [
        f"Machine: {results['machine']}; faiss {results['faiss']}; {results['embedding_model']} "
        f"({results['dim']}-d); queries: {results['queries']}.",
        f"Data `real`: {results['real_vectors']:,} embeddings of distinct LoCoMo texts. `real+noise`: those plus "
        f"copies with Gaussian noise (sigma {results['noise_sigma']}/dim, renormalized; copy-to-source cosine "
        f"{results['noisy_copy_cosine_to_source']}, against a median nearest-neighbour cosine of "
        f"{results['real_nearest_neighbour_cosine']} among real texts). Load average (1 min) at start / end: "
        f"{' / '.join(str(x) for x in results['load_average_1min'])} (other jobs shared the 2 cores).",
        "",
        "| vectors | data | backend | build | index MB | RSS Δ MB | open | single p50 / p99 (1 thr) "
        "| batch 64 p50 / p99 (1 thr) | batch 64 p50 (2 thr) | recall@10 | nlist / nprobe |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in results["runs"]:
        lists = f"{row['nlist']} / {row['nprobe']}" if row["nlist"] else "—"
        lines.append(
            f"| {row['size']:,} | {row['data']} | {row['backend']} | {row['build_s']} s "
            f"| {row['index_bytes'] * mb:,.0f} | {row['rss_delta_bytes'] * mb:,.0f} | {row['open_s']} s "
            f"| {_latency_cells(row)} | {row['recall_at_10']:.3f} | {lists} |"
        )
        tuned = row.get("query_calibrated")
        if tuned:
            lines.append(
                f"| {row['size']:,} | {row['data']} | faiss-ivf, recalibrated on questions¹ "
                f"| {tuned['recalibrate_s']} s | — | — | — "
                f"| {_latency_cells(tuned)} | {tuned['recall_at_10_held_out']:.3f} "
                f"| {row['nlist']} / {tuned['nprobe']} |"
            )
    lines += [
        "",
        "Build: one add of every vector (IVF: k-means on 40 vectors per list, then nprobe calibrated to "
        "recall@10 ≥ 0.96 on 500 held-out stored vectors, never below 32 lists), 2 threads, timed until the "
        "background build is installed; Chroma: adds of 5,000, each durable. "
        "Open: loading the snapshot (Chroma: client, collection and a probe search). Latency samples: "
        "300 single queries and 30 batches, 40 and 5 for flat at 1M.",
        "",
        "¹ The same IVF index after the engine's `recalibrate()` on the questions it had served (half of "
        "them; the index keeps its last 512 queries): smallest nprobe reaching recall@10 0.96 on those, "
        "recall measured on the other half. The build column holds the recalibration's time.",
    ]
    return "\n".join(lines) + "\n"
