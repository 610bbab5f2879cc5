"""The offline LLM backend: extractive answers, facts and summaries without a model or a key.

`backend.py` is `OfflineLLM`; the others are its parts: `answers.py`, `extracts.py`, `person.py`
(whose words a sentence states), `replies.py` (chat replies), `stems.py` and `text.py` (word handling).
"""
