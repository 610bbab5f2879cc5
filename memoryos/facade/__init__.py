"""`Memoryos`: the reference package's API over the engine, so its users switch by changing one import.

`memoryos.py` opens a space with its embedder, LLM and scheduler and offers the reference methods;
`lifecycle.py` is its other half: list, read, edit and delete single items, fact history, forget.
`from memoryos import Memoryos` is the public path.
"""
