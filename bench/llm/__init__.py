"""A real language model on this machine: building and serving the pinned local model
(`local_model.sh`), and collecting its long-term memory proposals to label (`collect_proposals.py`)."""
