"""NVIDIA MIG geometry per GPU: which profiles a GPU offers and how many of each fit.

From NVIDIA's MIG user guide ("Supported MIG Profiles"). Each profile uses compute
slices (of 7) and memory slices (of 8); a layout of one GPU must fit both budgets, and a
profile appears at most ``max`` times. Keyed by (GPU model, GPU memory GiB) as the
catalog names them.
"""

from __future__ import annotations

from dataclasses import dataclass

COMPUTE_SLICES = 7
MEMORY_SLICES = 8


@dataclass(frozen=True)
class MigProfile:
    name: str  # "1g.10gb": the resource is nvidia.com/mig-1g.10gb
    max: int  # instances of this profile one GPU holds at most
    compute: int  # compute slices (of 7)
    memory: int  # memory slices (of 8)


def _profiles(*rows: tuple[str, int, int, int]) -> dict[str, MigProfile]:
    return {name: MigProfile(name, most, compute, memory) for name, most, compute, memory in rows}


_A100_40 = _profiles(("1g.5gb", 7, 1, 1), ("2g.10gb", 3, 2, 2), ("3g.20gb", 2, 3, 4),
                     ("4g.20gb", 1, 4, 4), ("7g.40gb", 1, 7, 8))
_80GB = _profiles(("1g.10gb", 7, 1, 1), ("1g.20gb", 4, 1, 2), ("2g.20gb", 3, 2, 2),
                  ("3g.40gb", 2, 3, 4), ("4g.40gb", 1, 4, 4), ("7g.80gb", 1, 7, 8))

# H200 141GB: the MIG user guide's H200 table (1g.18gb uses 1/8 of the memory, 1g.35gb
# and 2g.35gb 1/4, like 1g.20gb and 2g.20gb on 80GB parts).
_H200 = _profiles(("1g.18gb", 7, 1, 1), ("1g.35gb", 4, 1, 2), ("2g.35gb", 3, 2, 2),
                  ("3g.71gb", 2, 3, 4), ("4g.71gb", 1, 4, 4), ("7g.141gb", 1, 7, 8))

MIG_GEOMETRY: dict[tuple[str, int], dict[str, MigProfile]] = {
    ("A100", 40): _A100_40,
    ("A100", 80): _80GB,
    ("H100", 80): _80GB,
    ("H200", 141): _H200,
}


def mig_profiles(gpu_model: str, gpu_memory_gib: int) -> dict[str, MigProfile]:
    """The GPU's MIG profiles; empty when the GPU has no MIG (V100, T4, A10G...)."""
    return MIG_GEOMETRY.get((gpu_model, gpu_memory_gib), {})


def layout_problems(gpu_model: str, gpu_memory_gib: int, layout: list[str]) -> list[str]:
    """Why ``layout`` (the MIG instances of one GPU) cannot be made on this GPU."""
    profiles = mig_profiles(gpu_model, gpu_memory_gib)
    if not profiles:
        return [f"{gpu_model} {gpu_memory_gib}GB has no MIG"]
    unknown = sorted({p for p in layout if p not in profiles})
    if unknown:
        return [f"{gpu_model} {gpu_memory_gib}GB has no MIG profile {', '.join(unknown)} "
                f"(it has {', '.join(profiles)})"]
    out = [f"{name} fits at most {profiles[name].max} time(s) on one {gpu_model} {gpu_memory_gib}GB"
           for name in sorted(set(layout)) if layout.count(name) > profiles[name].max]
    compute = sum(profiles[p].compute for p in layout)
    memory = sum(profiles[p].memory for p in layout)
    if compute > COMPUTE_SLICES or memory > MEMORY_SLICES:
        out.append(f"the layout uses {compute}/{COMPUTE_SLICES} compute and {memory}/"
                   f"{MEMORY_SLICES} memory slices of one GPU")
    return out
