"""One user's memory with one assistant: its state, the ops that change it, its policy, its files.

`MemorySpace` (`memory_space.py`) holds a space's store and page index and changes only through
`apply(op)`; `ops.py` is the op wire format every writer sends, `writes.py` turns a checked write into
its op, `apply.py` and `apply_lifecycle.py` are what each op does, `policy.py` the pure rules (heat,
segment choice, eviction, promotion, fact dedup). `layout.py` places spaces on disk, `page_index.py`
keeps the vector index in step with the store, `pool.py` keeps a worker's spaces open within a budget.
Nothing here plans: the planners in `memoryos.planning` read a space and return ops.
"""
