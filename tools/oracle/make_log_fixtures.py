"""Write the server-log test fixtures with the servers' own logging code.

Run with the vLLM 0.33.0 oracle venv (../shared/oracle/README.md) for the vLLM logs, and
with an SGLang 0.5.x venv for the SGLang log; each run writes the files of the library it
finds:

    ~/.cache/hpa-oracle/bin/python tools/oracle/make_log_fixtures.py tests/fixtures/external
    ~/.cache/hpa-oracle-sglang/bin/python tools/oracle/make_log_fixtures.py tests/fixtures/external

vLLM: `RequestLogger.log_inputs` / `log_outputs` (vllm/entrypoints/serve/utils/
request_logger.py) with vLLM's own logging configuration (vllm/logger.py, DEBUG level, no
colour), and the lines of vllm/entrypoints/common/startup.py:96 (non-default args) and
vllm/v1/engine/core.py:139 (the engine's config) emitted through the same handler as
records of those files and lines (their objects need a model or a device to build).
SGLang: `RequestLogger.log_received_request` / `log_finished_request`
(python/sglang/srt/utils/request_logger.py) at `--log-requests-level 3` on real
`GenerateReqInput`s, and configure_logger's format for the server_args line. Clock and
process ids are fixed, so a run writes the same bytes.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import logging
import os
import random
import sys
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

START_S = 1796605200.0  # 2026-12-07 01:00:00 UTC
WORDS = "cache prefix block token request shared system prompt model turn reply tool".split()


def _fixed_clock() -> None:
    """Records stamped one second apart from START_S, with a fixed pid."""
    made = logging.getLogRecordFactory()
    clock = iter(range(10**6))

    def factory(*args, **kwargs):
        record = made(*args, **kwargs)
        record.created = START_S + next(clock)
        record.msecs = 0.0
        record.process = 4127
        return record

    logging.setLogRecordFactory(factory)


def _ids(rng: random.Random, n: int) -> list[int]:
    return [rng.randrange(1000, 150_000) for _ in range(n)]


def _text(rng: random.Random, n_tokens: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n_tokens))


def _to_file(path: Path) -> logging.Handler:
    """Send vLLM's handler to `path` (its formatter kept)."""
    handler = logging.getLogger("vllm").handlers[0]
    handler.setStream(open(path, "w"))  # noqa: SIM115 (closed by _close)
    return handler


def _close(handler: logging.Handler) -> None:
    handler.setStream(sys.stderr).close()  # setStream flushes, and returns the file


def _line_of(name: str, where: tuple[str, int], msg: str, *args) -> None:
    """An INFO line of vLLM's logger `name` as written at `where` (file under vllm/, line),
    through vLLM's handler: for lines whose objects need a model or a GPU to build."""
    import vllm
    from vllm.logger import init_logger

    logger = init_logger(name)
    path = str(Path(vllm.__file__).parent / where[0])
    logger.handle(logger.makeRecord(logger.name, logging.INFO, path, where[1], msg, args, None))


def _engine_line(model: str) -> None:
    """vllm/v1/engine/core.py:139's config line (a VllmConfig needs a model to build)."""
    import vllm

    config = f"model={model!r}, speculative_config=None, tokenizer={model!r}"
    _line_of(
        "vllm.v1.engine.core", ("v1/engine/core.py", 139),
        "Initializing a V1 LLM engine (v%s) with config: %s", vllm.__version__, config,
    )  # fmt: skip


def _args_line(max_log_len: int | None, model: str) -> None:
    """vllm/entrypoints/common/startup.py:96 (log_non_default_args) for `vllm serve MODEL
    --enable-log-requests --enable-log-outputs [--max-log-len N]`: its parser's defaults
    need a device to compute, so the dict is the one it logs for these flags."""
    from vllm.entrypoints.common.startup import redact_sensitive_args

    args = {"model_tag": model, "model": model, "enable_log_requests": True,
            "enable_log_outputs": True}  # fmt: skip
    if max_log_len is not None:
        args["max_log_len"] = max_log_len
    _line_of(
        "vllm.entrypoints.common.startup", ("entrypoints/common/startup.py", 96),
        "non-default args: %s", redact_sensitive_args(args),
    )  # fmt: skip


def vllm_logs(out: Path) -> None:
    os.environ.update(VLLM_LOGGING_LEVEL="DEBUG", NO_COLOR="1")
    _fixed_clock()
    from vllm.entrypoints.serve.utils.request_logger import RequestLogger
    from vllm.logger import _configure_vllm_root_logger, set_vllm_process_name
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams

    _configure_vllm_root_logger()
    set_vllm_process_name("APIServer")
    model = "Qwen/Qwen3-0.6B"
    params = SamplingParams(max_tokens=64, temperature=0.7)
    rng = random.Random(49)

    handler = _to_file(out / "vllm_log" / "vllm033_server.log")
    _args_line(None, model)
    _engine_line(model)
    log = RequestLogger(max_log_len=None)
    p1, o1 = _ids(rng, 40), _ids(rng, 12)
    log.log_inputs("chatcmpl-a1", _text(rng, 40), p1, None, params, None)
    log.log_outputs("chatcmpl-a1", "A prefix cache keeps the KV of a prompt.", o1, "stop")
    lora = LoRARequest("sql-adapter", 1, "/adapters/sql")
    pb, ob = _ids(rng, 30), _ids(rng, 5)
    log.log_inputs("cmpl-b-0", "SELECT 'it''s'", pb, None, params, lora)
    log.log_outputs("cmpl-b-0", " FROM t", ob, "length")
    p2, o2 = p1 + o1 + _ids(rng, 20), _ids(rng, 9)
    log.log_inputs("chatcmpl-a2", _text(rng, 72), p2, None, params, None)
    log.log_outputs("chatcmpl-a2", "Only when the prefix matches.", o2, "stop")
    log.log_inputs("chatcmpl-s", _text(rng, 25), _ids(rng, 25), None, params, None)
    log.log_outputs("chatcmpl-s", "streamed", None, "streaming_complete", True, False)
    log.log_outputs("chatcmpl-gone", "its prompt came before the log", _ids(rng, 3), "stop")
    twice = _ids(rng, 15)
    log.log_inputs("chatcmpl-twice", _text(rng, 15), twice, None, params, None)
    log.log_inputs("chatcmpl-twice", _text(rng, 15), twice, None, params, None)
    log.log_outputs("chatcmpl-twice", "again", _ids(rng, 4), "stop")
    _close(handler)

    # --max-log-len 512: six prompts of 1,573 to 1,939 ids sharing their first 1,201.
    shared = _ids(rng, 1201)
    for name, max_log_len in (("vllm033_max_log_len.log", 512), ("vllm033_fixed_len.log", None)):
        handler = _to_file(out / "vllm_log" / name)
        _args_line(max_log_len, model)
        log = RequestLogger(max_log_len=max_log_len)
        for k, n in enumerate((1573, 1650, 1702, 1788, 1855, 1939)):
            if max_log_len is None:  # the control: prompts of exactly 512 ids, whole
                prompt = _ids(rng, 512)
                text = _text(rng, 512)
            else:
                prompt = shared + _ids(rng, n - len(shared))
                text = _text(rng, n)
            rid = f"chatcmpl-{k}"
            log.log_inputs(rid, text, prompt, None, params, None)
            log.log_outputs(rid, _text(rng, 20), _ids(rng, 20), "stop")
        _close(handler)


def _stub_torchvision() -> None:
    """SGLang's io_struct imports model configs that import torchvision (absent from a CPU
    venv); the request logger never uses it: a stand-in module is enough to import it."""
    import transformers.utils.import_utils as iu

    iu.is_torchvision_available()  # cached as absent before the stand-in exists

    class Finder:
        def find_spec(self, name, path=None, target=None):
            if name == "torchvision" or name.startswith("torchvision."):
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            module = mock.MagicMock()
            module.__spec__, module.__path__, module.__name__ = spec, [], spec.name
            return module

        def exec_module(self, module):
            pass

    sys.meta_path.append(Finder())


def sglang_log(out: Path) -> None:
    _fixed_clock()
    _stub_torchvision()
    from sglang.srt.managers.io_struct import GenerateReqInput
    from sglang.srt.utils.common import configure_logger
    from sglang.srt.utils.request_logger import RequestLogger

    path = out / "sglang_log" / "sglang0523_server.log"
    configure_logger(SimpleNamespace(log_level="info"))
    root = logging.getLogger()
    stream = open(path, "w")  # noqa: SIM115
    root.handlers[0].setStream(stream)
    model = "Qwen/Qwen3-0.6B"
    logging.getLogger("sglang.srt.entrypoints.engine").info(
        f"server_args={ {'model_path': model, 'tokenizer_path': model, 'log_requests': True} }"
    )
    log = RequestLogger(True, 3, "text", None)
    log.targets[0].handlers[0].setStream(stream)
    rng = random.Random(49)

    def request(rid, ids, text=None):
        obj = GenerateReqInput(
            input_ids=ids, text=text, rid=rid, sampling_params={"max_new_tokens": 16}
        )
        log.log_received_request(obj)
        return obj

    def finish(obj, outputs, cached):
        prompt = len(obj.input_ids) if obj.input_ids is not None else 7
        meta = {"id": obj.rid, "finish_reason": {"type": "stop", "matched": 151645},
                "prompt_tokens": prompt, "completion_tokens": len(outputs),
                "cached_tokens": cached, "e2e_latency": 0.5}  # fmt: skip
        out = {"text": _text(rng, len(outputs)), "output_ids": outputs, "meta_info": meta}
        log.log_finished_request(obj, out)

    p1, o1 = _ids(rng, 40), _ids(rng, 12)
    finish(request("a1", p1), o1, 0)
    p2 = p1 + o1 + _ids(rng, 20)
    finish(request("a2", p2), _ids(rng, 9), 52)
    twice = request("twice", _ids(rng, 15))
    finish(twice, _ids(rng, 4), 0)
    finish(twice, _ids(rng, 4), 0)
    finish(request("text-only", None, "Hello, who are you?"), _ids(rng, 6), 0)
    stream.close()


def main() -> None:
    out = Path(sys.argv[1])
    if importlib.util.find_spec("vllm") is not None:
        vllm_logs(out)
    try:
        found = importlib.util.find_spec("sglang.srt.utils.request_logger") is not None
    except ModuleNotFoundError:
        found = False
    if found:
        sglang_log(out)


if __name__ == "__main__":
    main()
