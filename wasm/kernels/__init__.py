"""The CPU backend's WebAssembly SIMD128 kernels: C sources (one file per family) and their build (build.py)."""
