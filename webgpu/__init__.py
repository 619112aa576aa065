"""ember.webgpu: the WebGPU backend (WGSL kernels) over wgpu-native or the page's navigator.gpu.

Use it through `ember.device("webgpu")`; `configure()` picks the adapter before first use and
`await init_async()` creates it in a page without JSPI. Importing this package never imports
wgpu: the native adapter loads it on first use.
"""
from .backend import WebGPUBackend, configure, init_async  # noqa: F401
