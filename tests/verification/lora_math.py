"""Random-weight LoRA adapters and their PEFT-merged reference logprobs (transformers, fp32).

The correctness tests need adapters that change the model a lot (so a wrong or missing adapter
shows), with different ranks and target modules; they need no training, so PEFT's
`init_lora_weights=False` (both A and B random) builds each in well under a second.
torch/transformers/peft are imported inside functions, as in lorafleet_demo.assets.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class AdapterSpec:
    name: str
    rank: int
    targets: tuple[str, ...]
    seed: int


# Three shapes: attention-only low rank, all attention projections, every projection at rank 16.
SPECS = (
    AdapterSpec("qv-r4", 4, ("q_proj", "v_proj"), 1),
    AdapterSpec("attn-r8", 8, ("q_proj", "k_proj", "v_proj", "o_proj"), 2),
    AdapterSpec(
        "all-r16",
        16,
        ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"),
        3,
    ),
)


def _base(base_dir: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32).eval()


def write_random_adapter(base_dir: Path, spec: AdapterSpec, dest: Path) -> Path:
    """A PEFT folder (adapter_config.json + adapter_model.safetensors) with random A and B."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(spec.seed)
    config = LoraConfig(
        r=spec.rank,
        lora_alpha=2 * spec.rank,
        target_modules=list(spec.targets),
        init_lora_weights=False,  # random B too: the adapter changes every logit
        task_type="CAUSAL_LM",
    )
    get_peft_model(_base(base_dir), config).save_pretrained(dest)
    return dest


def merged_logprobs(
    base_dir: Path, adapter_dir: Path | None, sequences: Sequence[tuple[list[int], list[int]]]
) -> list[list[float]]:
    """log p(completion[i] | prompt + completion[:i]) under base+adapter merged (merge_and_unload).

    `adapter_dir=None` scores the base model alone (to show an adapter changes the answer).
    """
    import torch
    from peft import PeftModel

    model = _base(base_dir)
    if adapter_dir is not None:
        model = PeftModel.from_pretrained(model, adapter_dir).merge_and_unload().eval()
    out: list[list[float]] = []
    with torch.no_grad():
        for prompt, completion in sequences:
            ids = torch.tensor([prompt + completion])
            logits = model(ids).logits[0].to(torch.float64)
            logp = torch.log_softmax(logits, dim=-1)
            # Token t is predicted from position t-1.
            out.append([float(logp[len(prompt) + i - 1, tok]) for i, tok in enumerate(completion)])
    return out
