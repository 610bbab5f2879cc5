"""Optional query rewrite by the configured LLM before retrieval: off by default (`query_rewrite`).

Multi-hop and open-domain questions name a kind of thing ("What activities does Melanie partake in?")
where the conversation names instances ("pottery class", "camping"), which neither BM25 nor a small
embedding model connects. A chat model can list what an answer would mention; the search then runs on the
question followed by those words (BM25 and the query embedding alike; dates and names still come from the
question). At most one call per distinct query, answered from an LRU cache after that, bounded by
`query_rewrite_timeout_s` with no retry: a failed or slow call leaves the question as it was. Not measured
on LoCoMo here (no model offline; docs/retrieval.md), hence off by default.
"""

import logging
import threading
from collections import OrderedDict

from memoryos.config import MemoryConfig
from memoryos.llm.parsing import strip_think

log = logging.getLogger(__name__)

CACHE_SIZE = 1024
"""Distinct queries whose rewrite is kept: a repeated question costs no second call."""

MAX_REWRITE_TOKENS = 64
"""A line of search words; also bounds the call's generation time."""

SYSTEM_PROMPT = (
    "You help search a long conversation between two people. Given a question about it, list the specific "
    "words the conversation would contain where it answers the question: things, activities, places, "
    "events, people. Reply with one line of comma-separated words, nothing else."
)


class QueryRewriter:
    """The question followed by the LLM's search words for it; thread-safe, one call per distinct query."""

    def __init__(self, config: MemoryConfig) -> None:
        from openai import OpenAI

        from memoryos.llm import PLACEHOLDER_API_KEY

        key = config.openai_api_key.get_secret_value() if config.openai_api_key is not None else ""
        self._client = OpenAI(
            api_key=key or PLACEHOLDER_API_KEY,
            base_url=config.openai_base_url,
            timeout=config.query_rewrite_timeout_s,
            max_retries=0,
        )
        self._model = config.llm_model
        self._cache: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()
        self.calls = 0
        """Completion calls made (cache misses), for cost accounting."""

    def search_text(self, query: str) -> str:
        """`query` followed by the LLM's search words; `query` alone when the call fails or times out
        (not cached, so a later retrieve may try again)."""
        with self._lock:
            if query in self._cache:
                self._cache.move_to_end(query)
                return self._cache[query]
            self.calls += 1
        words = self._ask(query)
        if words is None:
            return query
        text = f"{query} {words}"
        with self._lock:
            self._cache[query] = text
            while len(self._cache) > CACHE_SIZE:
                self._cache.popitem(last=False)
        return text

    def _ask(self, query: str) -> str | None:
        from openai import OpenAIError

        try:
            response = self._client.chat.completions.create(
                model=self._model,
                messages=[{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": query}],
                max_tokens=MAX_REWRITE_TOKENS,
                temperature=0.0,
            )
            content = response.choices[0].message.content if response.choices else None
        except (OpenAIError, ValueError, AttributeError) as err:
            log.warning(
                "query rewrite failed; searching with the question as written",
                extra={"error": type(err).__name__},
            )
            return None
        words = " ".join(strip_think(content or "").split())
        return words or None


def query_rewriter(config: MemoryConfig) -> QueryRewriter | None:
    """A rewriter when `query_rewrite` is on and an LLM endpoint (key or base URL) is configured."""
    has_key = config.openai_api_key is not None and bool(config.openai_api_key.get_secret_value())
    if not config.query_rewrite or not (has_key or config.openai_base_url):
        return None
    return QueryRewriter(config)
