"""The embedding model run by ONNX Runtime: queries on the CPU without PyTorch's per-operator dispatch,
and a whole embedder where PyTorch is not installed (docs/engine.md).

- `queries.py`: exports the loaded PyTorch model and checks the export against it (`OnnxQueryEncoder`);
- `manifest.py`: what an export holds and was checked against, written beside it;
- `encoder.py`: runs an export with the model's tokenizer alone, checking its manifest on load;
- `build.py`: writes the graph from the model's safetensors, without PyTorch;
- `torch_free.py`: the export and manifest built that way, checked against vectors recorded ahead of time;
- `reference.py`: records those vectors (`references.json`), with PyTorch.
"""
