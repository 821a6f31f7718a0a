"""A DCGM-exporter-compatible GPU endpoint for the simulator (``GET /dcgm/metrics``, opt-in).

The simulated GPU is derived from the engine model, one GPU, so every resource number of a
report can be produced offline. With ``B`` the profile's memory bandwidth
(:data:`HBM_BYTES_PER_S`, the figure its ``weights_read_s`` was calibrated with):

* memory used (MiB) = runtime overhead + model weights (``weights_read_s x B``) + draft
  weights when a draft model speculates (``draft.pass_s x B``) + KV cache in use (tokens held
  x ``kv_read_s_per_token x B``), capped at the card's memory. (A real vLLM preallocates its
  KV pool, so its framebuffer use is flat; the model shows what the KV *holds* instead.)
* utilisation (``DCGM_FI_DEV_GPU_UTIL``, %) = the share of the interval since the previous
  scrape during which an engine step was running (busy fraction ``u``);
* SM activity (``DCGM_FI_PROF_SM_ACTIVE``, 0-1) = busy seconds weighted by each step's compute
  share ``compute / max(memory, compute)`` over the interval (``a``): small batches are
  memory-bound and leave SMs idle, large batches fill them;
* power (W) = idle + (TDP - idle) x (0.5 u + 0.5 a): a busy memory-bound GPU draws about
  half its dynamic range, a compute-bound one all of it;
* energy (``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION``, mJ) = the integral of that power since
  the server started (exact for the model: it uses the cumulative busy counters);
* temperature = ambient + (max - ambient) x power / TDP; SM clock constant at boost.

Values are computed at scrape time from cumulative engine counters, so concurrent scrapers
each see consistent interval means. Formulas are documented in docs/resources.md.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tokenswarm.sim.simmetrics import Exposition

MIB = float(1 << 20)
#: Memory bandwidth the shipped profiles were calibrated with (27b-1gpu: 54 GB in 23 ms).
HBM_BYTES_PER_S = 2.4e12


@dataclass(frozen=True)
class GpuCard:
    """The simulated card (H100-class defaults)."""

    model_name: str = "NVIDIA H100 80GB HBM3 (tokenswarm sim)"
    memory_mib: float = 81559.0
    runtime_overhead_mib: float = 1500.0  #: CUDA context, activations, graphs
    idle_w: float = 70.0
    tdp_w: float = 700.0
    ambient_c: float = 32.0
    max_c: float = 82.0
    sm_clock_mhz: float = 1980.0
    uuid: str = "GPU-00000000-0000-4000-8000-7065736b7377"


class GpuModel:
    """Turns the scheduler's cumulative counters into DCGM readings (see the module docstring)."""

    def __init__(self, sched: Any, draft_weights: bool, card: GpuCard | None = None,
                 clock: Any = time.monotonic) -> None:
        self.sched = sched
        self.card = card or GpuCard()
        self.clock = clock
        p = sched.p
        self.weights_mib = p.weights_read_s * HBM_BYTES_PER_S / MIB
        self.draft_mib = p.draft.pass_s * HBM_BYTES_PER_S / MIB if draft_weights else 0.0
        self.kv_mib_per_token = p.kv_read_s_per_token * HBM_BYTES_PER_S / MIB
        self.started_s = clock()
        self._last = (self.started_s, 0.0, 0.0)  # (time, busy_s, compute_weighted_s) at the last scrape
        self._last_rates = (0.0, 0.0)

    def kv_tokens(self) -> int:
        return sum(s.prefilled + s.n_out for s in self.sched.running)

    def memory_used_mib(self) -> float:
        c = self.card
        used = c.runtime_overhead_mib + self.weights_mib + self.draft_mib + self.kv_tokens() * self.kv_mib_per_token
        return float(min(c.memory_mib, used))

    def power_w(self, busy: float, active: float) -> float:
        c = self.card
        return c.idle_w + (c.tdp_w - c.idle_w) * (0.5 * busy + 0.5 * active)

    def readings(self) -> dict[str, float]:
        """Current readings; utilisation and power are means over the interval since the last call."""
        now = self.clock()
        st = self.sched.stats
        t0, b0, a0 = self._last
        dt = now - t0
        if dt >= 0.05:
            # Steps are accounted when planned: clip to [0, 1] over short intervals.
            busy = min(1.0, max(0.0, (st.busy_s - b0) / dt))
            active = min(1.0, max(0.0, (st.compute_weighted_s - a0) / dt))
            self._last = (now, st.busy_s, st.compute_weighted_s)
            self._last_rates = (busy, active)
        else:
            busy, active = self._last_rates
        c = self.card
        elapsed = max(0.0, now - self.started_s)
        dyn = c.tdp_w - c.idle_w
        energy_j = c.idle_w * elapsed + dyn * (0.5 * min(st.busy_s, elapsed) + 0.5 * min(st.compute_weighted_s, elapsed))
        power = self.power_w(busy, active)
        used = self.memory_used_mib()
        return {
            "fb_used_mib": used, "fb_free_mib": c.memory_mib - used, "gpu_util_pct": 100.0 * busy,
            "sm_active": active, "power_w": power, "energy_mj": energy_j * 1000.0,
            "temp_c": c.ambient_c + (c.max_c - c.ambient_c) * power / c.tdp_w, "sm_clock_mhz": c.sm_clock_mhz,
        }

    def text(self, hostname: str = "tokenswarm-sim") -> str:
        """The exposition in dcgm-exporter's format (gauges, energy as a counter, its labels)."""
        r = self.readings()
        c = self.card
        e = Exposition({"gpu": "0", "UUID": c.uuid, "device": "nvidia0", "modelName": c.model_name,
                        "Hostname": hostname, "pci_bus_id": "00000000:00:00.0"})
        e.gauge("DCGM_FI_DEV_SM_CLOCK", "SM clock frequency (in MHz).", r["sm_clock_mhz"])
        e.gauge("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", round(r["temp_c"], 1))
        e.gauge("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", round(r["power_w"], 3))
        e.lines += ["# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).",
                    "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter",
                    f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{e._labels(None)} {round(r['energy_mj'])}"]
        e.gauge("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", round(r["gpu_util_pct"], 1))
        e.gauge("DCGM_FI_DEV_FB_FREE", "Framebuffer memory free (in MiB).", round(r["fb_free_mib"]))
        e.gauge("DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", round(r["fb_used_mib"]))
        e.gauge("DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned (in %).",
                round(r["sm_active"], 4))
        return e.text()
