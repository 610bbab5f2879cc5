"""The HTTP API over the engine (`memoryos serve`): FastAPI routes that validate, authorize and hand work
to `Memoryos`. No memory logic lives here; `create_app` in `main.py` builds the app."""
