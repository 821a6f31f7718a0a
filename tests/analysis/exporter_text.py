"""Recorded-style Prometheus expositions of GPU exporters and serving engines (documented names).

Each text follows the exporter's documented metric names, labels and units: NVIDIA dcgm-exporter
(default counters), AMD device-metrics-exporter (lower-case names, ``gpu_id`` label), vLLM,
SGLang, TGI and llama.cpp's server (with the ``llamacpp:spec_decode_*`` counters of the
speculative build). Values are made up but consistent. The texts are data files in
``expositions/`` (``<name>.prom``), read once here.
"""

from pathlib import Path

_HERE = Path(__file__).parent / "expositions"


def _exposition(name: str) -> str:
    return (_HERE / f"{name}.prom").read_text()


DCGM_TWO_GPUS = _exposition("dcgm_two_gpus")
AMD_ONE_GPU = _exposition("amd_one_gpu")
VLLM_SPEC = _exposition("vllm_spec")
SGLANG = _exposition("sglang")
TGI = _exposition("tgi")
LLAMACPP_SPEC = _exposition("llamacpp_spec")
