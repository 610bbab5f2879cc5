"""How `space_v1/` was made: run with the MemoryOS of commit 13326ee (store schema version 1) as
`python tests/data/space_v1/make_v1.py OUT_DIR` from the repository root, then copy
`OUT_DIR/default/maya/default_assistant_profile/{memory.sqlite,pages.faiss}` here. Kept so the fixture
can be made again; today's code writes version 2, so running it now makes a version-2 store."""

import shutil
import sys
from pathlib import Path

from memoryos import Memoryos
from memoryos.config import MemoryConfig
from tests.support.fakes import FakeClock, HashEmbedder

TOPICS = [
    "I adopted a dog called Pico",
    "Pico loves the beach",
    "I play the cello in an orchestra",
    "The orchestra plays Brahms in June",
    "My sister Lena lives in Lisbon",
    "Lena visits in August",
    "I am learning Portuguese for Lisbon",
    "Pico chewed my cello case",
]


def main(out: Path) -> None:
    shutil.rmtree(out, ignore_errors=True)
    clock = FakeClock()
    config = MemoryConfig(
        data_dir=out, ingest_mode="inline", short_term_capacity=3, mid_term_heat_threshold=1.0
    )
    memory = Memoryos.from_config("maya", config, embedder=HashEmbedder(), clock=clock)
    for text in TOPICS:
        clock.advance(hours=1)
        memory.add_memory(text, f"Noted: {text.lower()}.")
    memory.retrieve("What is my dog called?")
    memory.force_mid_term_analysis()
    memory.close()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
