"""The host tier's capacity pinned in chunks, for the offload oracle (vllm_offload_oracle.py).

vLLM 0.33's `CPUOffloadingSpec` sizes the host tier from `cpu_bytes_to_use` and the GPU pool's
bytes per block (`worker_kv_bytes_per_block`, from the KV-cache tensors the worker allocates;
the oracle allocates none). This spec, loaded by vLLM's own out-of-tree hook
(`kv_connector_extra_config = {"spec_name": "OracleCPUSpec", "spec_module_path":
"oracle_offload_spec", "num_cpu_chunks": N, ...}`, `OffloadingSpecFactory.get_spec_cls`),
is that spec with `num_chunks` set to N before the manager is built; everything else (the
`CPUOffloadingManager`, its LRU / ARC policy, the chunk geometry) is vLLM's.

Runs only in the oracle's venv (vLLM installed); nothing of hpa imports it.
"""

from vllm.v1.kv_offload.cpu.common import CPUOffloadingInfo
from vllm.v1.kv_offload.cpu.spec import CPUOffloadingSpec


class OracleCPUSpec(CPUOffloadingSpec):
    """`CPUOffloadingSpec` holding exactly `num_cpu_chunks` chunks."""

    def __init__(self, config) -> None:
        super().__init__(config)
        self.num_chunks = int(self.extra_config["num_cpu_chunks"])
        self.cpu_info = CPUOffloadingInfo.from_config(
            config, self.num_chunks, self.kv_bytes_per_chunk
        )
