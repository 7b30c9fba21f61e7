"""vLLM 0.33.0's hybrid prefix cache, replayed serially (engine `vllm`)."""

from analyzer.sim.vllm.replay import VllmReplay, replay

__all__ = ["VllmReplay", "replay"]
