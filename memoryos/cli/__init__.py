"""The `memoryos` command: argument parsing and dispatch (`main.py`), and one module per concern.

`session.py` opens a space for a command and stops on Ctrl-C, `input.py` checks what `add` reads,
`output.py` prints text for people or `--json` for programs, `bundle.py` and `lifecycle.py` are the
export/import and list/delete/history commands, `chat.py` and `demo.py` the interactive loop and the
first-run demo. Heavy modules (the embedding model, faiss) are imported inside commands, so `--help`
stays instant.
"""
