"""Is this WebGPU adapter real hardware? The rule `auto` follows natively and in the page.

A software adapter (the browser's fallback adapter, Chromium's SwiftShader, Mesa's llvmpipe /
lavapipe, Windows' WARP "Microsoft Basic Render Driver") runs WGSL on the CPU, slower than ember's
own CPU backend by a wide margin (YOLOv8s: 16 minutes on SwiftShader against 7 s on the CPU), so
`auto` takes the CPU there and says why; naming "webgpu" explicitly still uses it.
"""
from __future__ import annotations

_SOFTWARE_NAMES = ("swiftshader", "llvmpipe", "lavapipe", "softpipe", "microsoft basic render", "warp")
_KEY_LIMITS = (("max-buffer-size", "max buffer"), ("max-storage-buffer-binding-size", "max storage binding"),
               ("max-compute-workgroup-storage-size", "workgroup storage"),
               ("max-compute-invocations-per-workgroup", "invocations/workgroup"))


def software_reason(details: dict) -> str | None:
    """Why an adapter is a software renderer, or None for hardware. details: vendor, architecture,
    device, description (strings), adapter_type ("CPU" natively), fallback (the browser's
    isFallbackAdapter)."""
    parts = [str(details.get(k) or "") for k in ("device", "description", "vendor", "architecture")]
    name = ", ".join(p for i, p in enumerate(parts) if p and not any(p in q for q in parts[:i]))
    if details.get("fallback"):
        return f"the only WebGPU adapter is the browser's fallback adapter ({name or 'no name'}), a software renderer"
    if str(details.get("adapter_type") or "").upper() == "CPU":
        return f"the only WebGPU adapter runs on the CPU ({name})"
    low = name.lower()
    hit = next((s for s in _SOFTWARE_NAMES if s in low), None)
    if hit is not None:
        return f"the only WebGPU adapter is a software renderer ({name})"
    return None


def _size(n):
    for unit, shift in (("GiB", 30), ("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            return f"{n / (1 << shift):.4g} {unit}"
    return f"{n} B"


def describe(details: dict, limits: dict, features) -> str:
    """One line for `ember info` and the page: the adapter, its vendor/architecture, key limits."""
    who = details.get("device") or details.get("description")  # browsers often hide both
    parts = [who] if who else []
    va = " / ".join(str(details[k]) for k in ("vendor", "architecture") if details.get(k))
    if va:
        parts.append(f"vendor/architecture {va}")
    kind = ", ".join(str(details[k]) for k in ("backend_type", "adapter_type") if details.get(k))
    if kind:
        parts.append(kind)
    lim = ", ".join(f"{label} {_size(int(limits[k]))}" if "size" in k else f"{label} {int(limits[k])}"
                    for k, label in _KEY_LIMITS if k in limits)
    if lim:
        parts.append(lim)
    parts.append("shader-f16" if "shader-f16" in features else "no shader-f16")
    why = software_reason(details)
    if why is not None:
        parts.append("software renderer: device 'auto' uses the CPU")
    return "; ".join(parts)


def auto_device() -> tuple[str, str]:
    """('webgpu', '') when a hardware WebGPU adapter works here, else ('cpu', why): what `auto` means."""
    from ember.device import device, device_status
    ok, why = device_status("webgpu")
    if not ok:
        return "cpu", f"no usable WebGPU ({why})"
    sw = device("webgpu").backend.adapter.software
    if sw is not None:
        return "cpu", f"{sw}, slower than ember's CPU backend; device 'webgpu' forces it"
    return "webgpu", ""
