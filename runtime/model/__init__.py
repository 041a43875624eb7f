"""The built-in multimodal model served by Triton's Python backend.

Pure pieces (``settings``, ``inputs``, ``batching``, ``metrics`` names) import no torch; ``encoders`` holds the
torch model; ``triton_model`` is the Python-backend adapter and imports ``triton_python_backend_utils``,
which exists only inside the backend's stub process.
"""
