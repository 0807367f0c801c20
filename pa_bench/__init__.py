"""pa-bench: build, check and time int8-KV prompt-attention CUDA kernels."""

__version__ = "0.1.0"
