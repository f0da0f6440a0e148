"""Run by test_transformers_client in a fresh process: a tiny LLaMA through transformers' big-model path.

Saves a tiny model, loads it whole and with ``device_map="auto"`` + a small CPU budget + an offload
folder (transformers calls our ``dispatch_model`` and hooks), and prints one JSON line comparing logits.
"""

from __future__ import annotations

import json
import sys

import torch


def main(folder: str) -> None:
    import transformers
    from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
    from transformers.utils import import_utils

    config = LlamaConfig(
        vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, tie_word_embeddings=True,
    )  # fmt: skip
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    ids = torch.randint(0, 128, (1, 9), generator=torch.Generator().manual_seed(0))
    whole = AutoModelForCausalLM.from_pretrained(folder).eval()
    split = AutoModelForCausalLM.from_pretrained(
        folder, device_map="auto", max_memory={"cpu": 200_000}, offload_folder=f"{folder}/offload"
    ).eval()
    with torch.no_grad():
        expected, got = whole(ids).logits, split(ids).logits
        generated = split.generate(ids, max_new_tokens=3, do_sample=False)
        reference = whole.generate(ids, max_new_tokens=3, do_sample=False)
    hooked = [name for name, module in split.named_modules() if hasattr(module, "_hf_hook")]
    print(
        json.dumps(
            {
                "transformers": transformers.__version__,
                "accelerate_available": import_utils.is_accelerate_available(),
                "devices": sorted({str(d) for d in split.hf_device_map.values()}),
                "hooked": len(hooked),
                "equal": bool(torch.equal(expected, got)),
                "generate_equal": bool(torch.equal(generated, reference)),
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1])
