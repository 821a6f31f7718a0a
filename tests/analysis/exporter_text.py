"""Recorded-style Prometheus expositions of GPU exporters and serving engines (documented names).

Each text follows the exporter's documented metric names, labels and units: NVIDIA dcgm-exporter
(default counters), AMD device-metrics-exporter (lower-case names, ``gpu_id`` label), vLLM,
SGLang, TGI and llama.cpp's server (with the ``llamacpp:spec_decode_*`` counters of the
speculative build). Values are made up but consistent.
"""

DCGM_TWO_GPUS = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 1980
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 1755
# HELP DCGM_FI_DEV_GPU_TEMP GPU temperature (in C).
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 61
DCGM_FI_DEV_GPU_TEMP{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 58
# HELP DCGM_FI_DEV_POWER_USAGE Power draw (in W).
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 412.5
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 387.5
# HELP DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION Total energy consumption since boot (in mJ).
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 912345678
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 856000000
# HELP DCGM_FI_DEV_GPU_UTIL GPU utilization (in %).
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 87
DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 83
# HELP DCGM_FI_DEV_FB_FREE Framebuffer memory free (in MiB).
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 8151
DCGM_FI_DEV_FB_FREE{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 8199
# HELP DCGM_FI_DEV_FB_USED Framebuffer memory used (in MiB).
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 73408
DCGM_FI_DEV_FB_USED{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 73360
# HELP DCGM_FI_PROF_SM_ACTIVE The ratio of cycles an SM has at least 1 warp assigned.
# TYPE DCGM_FI_PROF_SM_ACTIVE gauge
DCGM_FI_PROF_SM_ACTIVE{gpu="0",UUID="GPU-1b2c",pci_bus_id="00000000:0F:00.0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 0.612
DCGM_FI_PROF_SM_ACTIVE{gpu="1",UUID="GPU-9f8e",pci_bus_id="00000000:2F:00.0",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="node-1"} 0.588
"""

AMD_ONE_GPU = """\
# HELP gpu_used_vram Total VRAM memory used in MB
# TYPE gpu_used_vram gauge
gpu_used_vram{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 150112
# HELP gpu_total_vram Total VRAM available in MB
# TYPE gpu_total_vram gauge
gpu_total_vram{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 196592
# HELP gpu_gfx_activity Graphics engine usage percentage (0 - 100)
# TYPE gpu_gfx_activity gauge
gpu_gfx_activity{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 64
# HELP gpu_package_power Current socket power in Watts
# TYPE gpu_package_power gauge
gpu_package_power{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 540
# HELP gpu_power_usage GPU power usage in Watts
# TYPE gpu_power_usage gauge
gpu_power_usage{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 530
# HELP gpu_energy_consumed Accumulated energy consumed by the GPU in Micro Jules (uJ)
# TYPE gpu_energy_consumed gauge
gpu_energy_consumed{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 4.2e+12
# HELP gpu_junction_temperature Hotspot (aka junction) temperature value in Celsius
# TYPE gpu_junction_temperature gauge
gpu_junction_temperature{card_model="AMD Instinct MI300X",card_series="AMD Instinct MI300X",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 71
# HELP gpu_clock Clock measure of the GPU in Mhz
# TYPE gpu_clock gauge
gpu_clock{card_model="AMD Instinct MI300X",clock_type="GPU_CLOCK_TYPE_SYSTEM",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 2100
gpu_clock{card_model="AMD Instinct MI300X",clock_type="GPU_CLOCK_TYPE_MEMORY",gpu_id="0",hostname="mi-node",serial_number="PHX1"} 1300
"""

VLLM_SPEC = """\
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 12.0
# HELP vllm:num_requests_waiting Number of requests waiting to be processed.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{engine="0",model_name="m"} 3.0
# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.
# TYPE vllm:kv_cache_usage_perc gauge
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.42
# HELP vllm:num_preemptions_total Cumulative number of preemption from the engine.
# TYPE vllm:num_preemptions_total counter
vllm:num_preemptions_total{engine="0",model_name="m"} 7.0
# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.
# TYPE vllm:prefix_cache_queries_total counter
vllm:prefix_cache_queries_total{engine="0",model_name="m"} 10000.0
# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.
# TYPE vllm:prefix_cache_hits_total counter
vllm:prefix_cache_hits_total{engine="0",model_name="m"} 2500.0
# HELP vllm:request_queue_time_seconds Histogram of time spent in WAITING phase for request.
# TYPE vllm:request_queue_time_seconds histogram
vllm:request_queue_time_seconds_bucket{engine="0",le="0.1",model_name="m"} 90.0
vllm:request_queue_time_seconds_bucket{engine="0",le="+Inf",model_name="m"} 100.0
vllm:request_queue_time_seconds_count{engine="0",model_name="m"} 100.0
vllm:request_queue_time_seconds_sum{engine="0",model_name="m"} 5.0
# HELP vllm:spec_decode_num_drafts_total Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts_total counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 5000.0
# HELP vllm:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE vllm:spec_decode_num_draft_tokens_total counter
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 15000.0
# HELP vllm:spec_decode_num_accepted_tokens_total Number of accepted tokens.
# TYPE vllm:spec_decode_num_accepted_tokens_total counter
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 10000.0
# HELP vllm:spec_decode_num_accepted_tokens_per_pos_total Accepted tokens per draft position.
# TYPE vllm:spec_decode_num_accepted_tokens_per_pos_total counter
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 5000.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 3000.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 2000.0
"""

SGLANG = """\
# HELP sglang:num_running_reqs The number of running requests.
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{model_name="m"} 9.0
# HELP sglang:num_queue_reqs The number of requests in the waiting queue.
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{model_name="m"} 2.0
# HELP sglang:token_usage The token usage.
# TYPE sglang:token_usage gauge
sglang:token_usage{model_name="m"} 0.31
# HELP sglang:cache_hit_rate The prefix cache hit rate.
# TYPE sglang:cache_hit_rate gauge
sglang:cache_hit_rate{model_name="m"} 0.12
# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{model_name="m"} 2.7
# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.
# TYPE sglang:spec_accept_rate gauge
sglang:spec_accept_rate{model_name="m"} 0.57
# HELP sglang:spec_verify_calls_total Verification calls.
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{model_name="m"} 4000.0
# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="m"} 10800.0
# HELP sglang:queue_time_seconds Histogram of queueing time in seconds.
# TYPE sglang:queue_time_seconds histogram
sglang:queue_time_seconds_bucket{le="0.1",model_name="m"} 40.0
sglang:queue_time_seconds_bucket{le="+Inf",model_name="m"} 50.0
sglang:queue_time_seconds_count{model_name="m"} 50.0
sglang:queue_time_seconds_sum{model_name="m"} 4.0
"""

TGI = """\
# TYPE tgi_queue_size gauge
tgi_queue_size 4
# TYPE tgi_batch_current_size gauge
tgi_batch_current_size 16
# TYPE tgi_request_queue_duration summary
tgi_request_queue_duration{quantile="0.5"} 0.01
tgi_request_queue_duration{quantile="0.99"} 0.2
tgi_request_queue_duration_sum 3.0
tgi_request_queue_duration_count 60
# TYPE tgi_request_skipped_tokens summary
tgi_request_skipped_tokens{quantile="0.5"} 1
tgi_request_skipped_tokens_sum 1500
tgi_request_skipped_tokens_count 1000
"""

LLAMACPP_SPEC = """\
# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 12000
# HELP llamacpp:tokens_predicted_total Number of generation tokens processed.
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 9000
# HELP llamacpp:n_decode_total Total number of llama_decode() calls
# TYPE llamacpp:n_decode_total counter
llamacpp:n_decode_total 4000
# HELP llamacpp:kv_cache_usage_ratio KV-cache usage. 1 means 100 percent usage.
# TYPE llamacpp:kv_cache_usage_ratio gauge
llamacpp:kv_cache_usage_ratio 0.25
# HELP llamacpp:requests_processing Number of requests processing.
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 2
# HELP llamacpp:requests_deferred Number of requests deferred.
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 1
# HELP llamacpp:spec_decode_num_drafts_total Number of speculative drafts.
# TYPE llamacpp:spec_decode_num_drafts_total counter
llamacpp:spec_decode_num_drafts_total 3000
# HELP llamacpp:spec_decode_num_draft_tokens_total Number of draft tokens.
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 12000
# HELP llamacpp:spec_decode_num_accepted_tokens_total Number of accepted draft tokens.
# TYPE llamacpp:spec_decode_num_accepted_tokens_total counter
llamacpp:spec_decode_num_accepted_tokens_total 6000
# HELP llamacpp:spec_decode_num_accepted_tokens_per_pos_total Accepted draft tokens per position.
# TYPE llamacpp:spec_decode_num_accepted_tokens_per_pos_total counter
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 2700
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 1800
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 1000
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 500
"""
