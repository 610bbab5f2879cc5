"""Planners that move memory up the tiers: STM → MTM (dialogue chains, topic segments) and MTM → LPM
(profile, user facts, assistant facts).

Planners make the LLM calls and embeddings and hand plain ops to `MemorySpace.apply`. An LLM failure
leaves the space as it was: the pages stay where they are and the work is retried on the next trigger,
so an error text can never become memory.
"""

import logging
import time
from collections.abc import Callable, Sequence
from datetime import datetime

from memoryos import policy
from memoryos.embedding.base import Embedder
from memoryos.errors import LLMError
from memoryos.llm.base import MemoryLLM
from memoryos.ops import AddKnowledge, FileTopic, LinkChain, MarkAnalyzed, UpdateProfile
from memoryos.space import MemorySpace
from memoryos.types import Page
from memoryos.validation import TIMESTAMP_FORMAT, format_unix_timestamp

log = logging.getLogger(__name__)

CHAIN_CONTEXT_PAGES = 8
"""Earlier chain pages shown when a chain's summary is refreshed: bounds the prompt of long chains."""


def _moment(page: Page) -> datetime:
    return datetime.strptime(page.timestamp, TIMESTAMP_FORMAT)


class Consolidator:
    """Runs the tier transitions of one space after writes, and on demand."""

    def __init__(self, llm: MemoryLLM, embedder: Embedder, clock: Callable[[], float] = time.time) -> None:
        self.llm = llm
        self.embedder = embedder
        self.clock = clock

    def run(self, space: MemorySpace) -> None:
        """Move STM overflow into mid-term memory, then promote every hot segment.

        The two steps fail independently: pages the LLM cannot file yet do not hold back the analysis of
        segments already hot.
        """
        try:
            self.move_overflow(space)
        except LLMError as error:
            log.warning("moving short-term overflow postponed: the LLM failed", extra={"error": str(error)})
        try:
            self.promote(space, space.segments_to_promote(self.clock()))
        except LLMError as error:
            log.warning("promotion postponed: the LLM failed", extra={"error": str(error)})

    def move_overflow(self, space: MemorySpace) -> None:
        """Pages beyond `short_term_capacity`, oldest first, join dialogue chains and then topic segments.

        Consecutive pages of one chain move as a run: one chain summary and one topic per run, not per page.
        A page already linked (a crash came between linking and filing) is filed without linking again.
        """
        stm = space.short_term_pages()
        overflow = stm[: max(0, len(stm) - space.config.short_term_capacity)]
        waiting = next((i for i, page in enumerate(overflow) if not page.embedded), None)
        overflow = overflow[:waiting]  # a page still waiting for its vector holds back the younger ones
        runs: list[tuple[bool, list[Page]]] = []
        previous = space.last_chained_page()
        last_linked = previous.page_id if previous is not None else 0  # as `apply` will see it
        for page in overflow:
            continues = page.chain_id is not None or self._continues(space, previous, page)
            if runs and continues:
                runs[-1][1].append(page)
            else:
                runs.append((continues, [page]))
            previous = page
        for continues, pages in runs:
            unlinked = [p for p in pages if p.chain_id is None]
            if unlinked:
                earlier = self._chain_so_far(space) if continues else []
                summary = self.llm.summarize_chain([*earlier[-CHAIN_CONTEXT_PAGES:], *pages])
                for position, page in enumerate(unlinked):
                    first = position == 0 and page is pages[0]
                    space.apply(
                        LinkChain(
                            page_id=page.page_id,
                            continues_previous=continues if first else True,
                            chain_summary=summary,
                            previous_page_id=last_linked,
                            at=self.clock(),
                        )
                    )
                    last_linked = page.page_id
            self._file(space, pages)

    def _continues(self, space: MemorySpace, previous: Page | None, page: Page) -> bool:
        if previous is None:
            return False
        gap_hours = abs((_moment(page) - _moment(previous)).total_seconds()) / 3600
        if gap_hours > space.config.chain_max_gap_hours:
            return False
        return self.llm.is_continuation(previous, page)

    def _chain_so_far(self, space: MemorySpace) -> list[Page]:
        """The pages of the chain the next page would continue (the last linked page's chain)."""
        previous = space.last_chained_page()
        if previous is None or previous.chain_id is None:
            return []
        return space.chain_pages(previous.chain_id)

    def _file(self, space: MemorySpace, pages: Sequence[Page]) -> None:
        """One topic for a run of pages. Its vector is the mean of the pages' vectors: it stands for what
        the pages say rather than for a summary of them, and costs no extra encode."""
        topic = self.llm.summarize_topic(pages)
        vectors = space.page_vectors([p.page_id for p in pages])
        space.apply(
            FileTopic(
                page_ids=[p.page_id for p in pages],
                summary=topic.summary,
                keywords=topic.keywords,
                vector=policy.unit_mean(vectors),
                at=self.clock(),
            )
        )

    def promote(self, space: MemorySpace, segment_ids: Sequence[int]) -> None:
        """Analyze each segment's unanalyzed pages into the profile and long-term facts, then reset it.

        A segment whose analysis fails keeps its pages unanalyzed (retried on a later trigger) and does not
        stop the others: one segment the LLM keeps failing on must not starve every segment behind it. The
        first failure is raised once the rest are done.
        """
        failure: LLMError | None = None
        for segment_id in segment_ids:
            try:
                self._promote_one(space, segment_id)
            except LLMError as error:
                failure = failure or error
        if failure is not None:
            raise failure

    def _promote_one(self, space: MemorySpace, segment_id: int) -> None:
        pages = space.unanalyzed_pages(segment_id)
        if not pages:
            return
        profile = self.llm.update_profile(space.profile(), pages)
        knowledge = self.llm.extract_knowledge(pages)
        timestamp = format_unix_timestamp(self.clock())
        space.apply(UpdateProfile(text=profile, source_segment_id=segment_id, at=self.clock()))
        for kind, texts in (("user", knowledge.user_facts), ("assistant", knowledge.assistant_facts)):
            if texts:
                vectors = self.embedder.encode(texts)
                space.apply(
                    AddKnowledge(
                        knowledge_kind=kind,
                        texts=texts,
                        vectors=vectors,
                        timestamp=timestamp,
                        at=self.clock(),
                    )
                )
        space.apply(MarkAnalyzed(segment_id=segment_id, page_ids=[p.page_id for p in pages], at=self.clock()))
