"""Write tests/fixtures/chat_reference_ids.json: what transformers makes of the chat tests'
conversations and prompts, the reference `hpa ingest --tokenizer` must equal.

For each small model folder of tests/traces/chat_helpers.py (a BPE tokenizer trained in code,
a real chat template): AutoTokenizer.from_pretrained(folder) and
apply_chat_template(messages, tools=..., add_generation_prompt=True, tokenize=True) (vLLM's
chat endpoint: the template's text encoded without added special tokens), and a completion
prompt encoded with add_special_tokens=True (vLLM's completion endpoint).

Run it where transformers is installed (not a dependency of hpa; CI reads the fixture):

    python3 -m venv /tmp/tx && /tmp/tx/bin/pip install transformers tokenizers jinja2
    /tmp/tx/bin/python tools/chat_reference/chat_reference_ids.py
"""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from tests.traces.chat_helpers import (  # noqa: E402
    CONVERSATIONS,
    MODELS,
    PROMPTS,
    REFERENCE,
    model_folder,
    template_kwargs,
)


def reference(folder: Path, name: str) -> dict:
    import tokenizers
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(str(folder))
    chats = [
        list(
            tok.apply_chat_template(
                conv["messages"],
                tools=conv.get("tools"),
                add_generation_prompt=True,
                tokenize=True,
                return_dict=False,
                **template_kwargs(name),
            )
        )
        for conv in CONVERSATIONS
    ]
    prompts = [tok(p, add_special_tokens=True)["input_ids"] for p in PROMPTS]
    raw = (folder / "tokenizer.json").read_bytes()
    return {
        "tokenizer_json_sha256": hashlib.sha256(raw).hexdigest(),
        "chat_ids": chats,
        "prompt_ids": prompts,
        "versions": {
            "transformers": transformers.__version__,
            "tokenizers": tokenizers.__version__,
        },
    }


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = {name: reference(model_folder(Path(tmp), name), name) for name in MODELS}
    REFERENCE.write_text(json.dumps(out, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {REFERENCE.relative_to(ROOT)}: {', '.join(out)}")


if __name__ == "__main__":
    main()
