"""How well memory answers: LoCoMo evidence recall, the retrieval signals tried, and the offline chat."""
