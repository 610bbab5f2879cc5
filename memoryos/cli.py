"""The `memoryos` command. Heavy modules (torch via sentence-transformers, faiss) are imported inside the
commands that need them, so `memoryos --help` answers at once."""

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memoryos.memoryos import Memoryos


def _open(args: argparse.Namespace) -> "Memoryos":
    from memoryos.config import MemoryConfig
    from memoryos.memoryos import Memoryos

    config = MemoryConfig(**({"data_dir": args.data_dir} if args.data_dir is not None else {}))
    return Memoryos.from_config(args.user, config, assistant_id=args.assistant)


def _print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, ensure_ascii=False))


def cmd_add(args: argparse.Namespace) -> None:
    with _open(args) as memory:
        if args.file:
            turns = [json.loads(line) for line in Path(args.file).read_text().splitlines() if line.strip()]
            ids = memory.add_memories(turns)
        else:
            meta = json.loads(args.meta) if args.meta else None
            ids = [memory.add_memory(args.user_input, args.agent_response, args.timestamp, meta)]
        _print_json({"page_ids": ids})


def cmd_retrieve(args: argparse.Namespace) -> None:
    with _open(args) as memory:
        context = memory.retrieve(args.query, top_k=args.top_k)
        if args.json:
            _print_json(context.model_dump())
            return
        for page in context.retrieved_pages:
            print(
                f"[{page.score:6.2f}] {page.timestamp}  user: {page.user_input}\n{'':30}assistant: {page.agent_response}"
            )
        for fact in context.retrieved_user_knowledge:
            print(f"user fact: {fact.knowledge}")


def cmd_profile(args: argparse.Namespace) -> None:
    with _open(args) as memory:
        print(memory.get_user_profile_summary() or "(no profile yet)")
        if args.knowledge:
            _print_json(
                {"user": memory.get_user_knowledge(), "assistant": memory.get_assistant_knowledge_summary()}
            )


def cmd_stats(args: argparse.Namespace) -> None:
    with _open(args) as memory:
        stats = memory.stats()
        if args.json:
            _print_json(stats.model_dump())
            return
        print(
            f"short-term pages: {stats.short_term_pages}  mid-term pages: {stats.mid_term_pages}  "
            f"archived pages: {stats.archived_pages}"
        )
        print(
            f"user facts: {stats.user_knowledge}  assistant facts: {stats.assistant_knowledge}  "
            f"profile versions: {stats.profile_versions}  model: {stats.embedding_model} ({stats.embedding_dim}-d)"
        )
        for segment in sorted(stats.segments, key=lambda s: -s.heat):
            print(
                f"  segment {segment.segment_id:>5}  heat {segment.heat:6.2f}  pages {segment.page_count:>4}  {segment.summary[:70]}"
            )


def cmd_chat(args: argparse.Namespace) -> None:
    with _open(args) as memory:
        print(f"Chatting as {args.user}; memory in {memory.space.directory}. Empty line or /quit ends.")
        for line in sys.stdin:
            text = line.strip()
            if not text or text == "/quit":
                break
            if text == "/profile":
                print(memory.get_user_profile_summary() or "(no profile yet)")
                continue
            print(f"assistant: {memory.get_response(text)}", flush=True)


def cmd_reindex(args: argparse.Namespace) -> None:
    from memoryos.config import MemoryConfig
    from memoryos.reindex import reindex_space

    config = MemoryConfig(
        **({"data_dir": args.data_dir} if args.data_dir else {}), embedding_model_name=args.model
    )
    report = reindex_space(config, args.user, args.assistant, show_progress=True)
    _print_json(report)


def cmd_demo(args: argparse.Namespace) -> None:
    from memoryos.demo import run_demo

    run_demo(args.data_dir or Path("./memoryos_demo_data"))


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="memoryos", description="Long-term memory for LLM agents.")
    parser.add_argument(
        "--data-dir", type=Path, default=None, help="root of the memory store (env MEMORYOS_DATA_DIR)"
    )
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, handler: Any, help_text: str, needs_user: bool = True) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help_text, description=help_text)
        if needs_user:
            sub.add_argument("--user", required=True, help="user id")
            sub.add_argument("--assistant", default="default_assistant_profile", help="assistant id")
        sub.set_defaults(handler=handler)
        return sub

    command("chat", cmd_chat, "chat interactively; the conversation is remembered across runs")
    add = command("add", cmd_add, "store an exchange (or a JSON-lines file of them)")
    add.add_argument("--user-input")
    add.add_argument("--agent-response")
    add.add_argument("--timestamp", default=None, help="ISO 8601 or 'YYYY-MM-DD HH:MM:SS'")
    add.add_argument("--meta", default=None, help="meta_data as a JSON object")
    add.add_argument(
        "--file", default=None, help="JSON lines of {user_input, agent_response, timestamp?, meta_data?}"
    )
    retrieve = command("retrieve", cmd_retrieve, "show what memory returns for a query")
    retrieve.add_argument("query")
    retrieve.add_argument("--top-k", type=int, default=None)
    retrieve.add_argument("--json", action="store_true")
    profile = command("profile", cmd_profile, "show the user profile")
    profile.add_argument("--knowledge", action="store_true", help="also list user and assistant facts")
    stats = command("stats", cmd_stats, "tier counts and segments with their heat")
    stats.add_argument("--json", action="store_true")
    reindex = command("reindex", cmd_reindex, "re-embed a space from its stored text with another model")
    reindex.add_argument("--model", required=True, help="embedding model name, e.g. BAAI/bge-m3")
    command("demo", cmd_demo, "store a short conversation and query it, offline", needs_user=False)
    from memoryos.eval.cli import register as register_eval

    register_eval(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from memoryos.errors import MemoryOSError

    try:
        args.handler(args)
    except (MemoryOSError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
