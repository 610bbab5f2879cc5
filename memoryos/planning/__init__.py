"""Deciding what memory does: planners that read a space and return ops, and the reads that rank it.

`consolidation.py` moves memory up the tiers (chains and topic segments, then profile and facts) and
`rebuild.py` plans the lifecycle's deferred work; `retrieval.py` ranks pages, facts and profile for a
question, helped by `lexical.py` (the keyword side), `temporal.py` (dates a question names),
`speaker.py` (whose words it asks about) and `query_rewrite.py` (the optional LLM rewrite);
`generation.py` assembles what the LLM sees when it answers. Planners never write: a space applies the
ops they return, so a plan can be retried, queued or dropped.
"""
