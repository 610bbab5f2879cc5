"""Markdown tables from the benchmark JSON, for docs/benchmarks/ and the README."""

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
