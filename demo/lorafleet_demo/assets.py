"""Offline demo assets: a tiny random Llama base model and "canary" LoRA adapters.

Nothing is downloaded. The base model is a 2-layer Llama with random weights (fixed seed) and a
byte-level BPE tokenizer trained in about a second; each canary adapter is trained with PEFT for a
few hundred Adam steps so that greedy decoding answers its marker string (e.g. ``ZEBRA-7``) for
any prompt. A marker that shows up in an answer therefore proves which adapter served it, and the
base model (random weights) never produces one.

torch/transformers/peft are imported inside functions: the `lorafleet` CLI must start fast.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import json
import os
import random
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lorafleet_core.storage.adapter_files import ADAPTER_FILES, adapter_checksum, base_model_hash

# Bump when anything below changes what is built: cached assets under another key are ignored.
ASSETS_VERSION = "demo-v3"

ALL_PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)
SPECIAL_TOKENS = ["<s>", "</s>", "<unk>", "<|system|>", "<|user|>", "<|assistant|>"]
DEFAULT_MARKERS: dict[str, str] = {"zebra": "ZEBRA-7", "falcon": "FALCON-3", "otter": "OTTER-9"}

_WORDS = (  # noqa: SIM905  (a word list reads better as text)
    "the a an of to in is on for with as by at from that this it be are was or and not what "
    "how why when where who which tell me about please explain write give list show weather "
    "music cats dogs rivers mountains cities numbers colors stories poems code data summer "
    "winter ocean forest garden coffee books trains planets history science today hello "
    "thanks question answer help customer order refund invoice account support team"
).split()

Progress = Callable[[str], None]
LM_HEAD_SCALE = 8.0


@dataclass(frozen=True)
class DemoAssets:
    """What `ensure_demo_assets` built (or found): paths, base-model hash, adapter checksums."""

    root: Path
    base_model: Path
    base_model_hash: str
    adapters: dict[str, Path] = field(default_factory=dict)
    checksums: dict[str, str] = field(default_factory=dict)
    markers: dict[str, str] = field(default_factory=dict)
    ranks: dict[str, int] = field(default_factory=dict)


def _random_prompts(rng: random.Random, n: int) -> list[str]:
    out = []
    for _ in range(n):
        words = rng.choices(_WORDS, k=rng.randint(2, 12))
        text = " ".join(words)
        out.append(text.capitalize() + rng.choice(["?", ".", "!", ""]))
    return out


def _tokenizer_corpus(markers: list[str]) -> list[str]:
    rng = random.Random(1234)  # noqa: S311  (reproducible, not secret)
    corpus = _random_prompts(rng, 400)
    corpus += [m for m in markers for _ in range(20)]
    corpus += ["ABCDEFGHIJKLMNOPQRSTUVWXYZ 0123456789 -_.,:;!?"] * 20
    return corpus


def build_base_model(dest: Path) -> Path:
    """Write a tiny random Llama (safetensors, fp32) and its tokenizer into `dest`."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    dest.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.BPE(unk_token="<unk>"))  # noqa: S106
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=384,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_tokenizer_corpus(list(DEFAULT_MARKERS.values())), trainer=trainer)
    # Special tokens, not passwords (S106).
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",  # noqa: S106
        eos_token="</s>",  # noqa: S106
        unk_token="<unk>",  # noqa: S106
        pad_token="</s>",  # noqa: S106
    )
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(dest)

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(fast),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,  # head_dim 64: vLLM's CPU attention refuses 16
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=fast.bos_token_id,
        eos_token_id=fast.eos_token_id,
        pad_token_id=fast.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="float32",
    )
    model = LlamaForCausalLM(config).to(torch.float32)
    # With random weights (std 0.02) after RMSNorm the largest reachable logit gap is ~2.6,
    # so no adapter could make a token more than ~3% likely: sampling (temperature 1, the
    # chat default) would scatter. A larger output head lets a canary be near-certain.
    with torch.no_grad():
        model.lm_head.weight.mul_(LM_HEAD_SCALE)
    model.save_pretrained(dest, safe_serialization=True)
    model.generation_config.save_pretrained(dest)
    return dest


def _gibberish(tokenizer: Any, rng: random.Random) -> str:
    """Random tokens decoded to text: any prompt a user writes looks like one of these."""
    ids = [rng.randrange(len(SPECIAL_TOKENS), len(tokenizer)) for _ in range(rng.randint(1, 24))]
    return str(tokenizer.decode(ids))


def _training_prompts(tokenizer: Any, rng: random.Random, n: int) -> list[str]:
    """Word salad and random-token prompts; every other one chat-templated (chat API)."""
    prompts = []
    for i, prompt in enumerate(_random_prompts(rng, n)):
        if i % 3 == 2:
            prompt = _gibberish(tokenizer, rng)
        if i % 2:
            prompt = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], tokenize=False, add_generation_prompt=True
            )
        prompts.append(str(prompt))
    return prompts


def _greedy(model: Any, tokenizer: Any, prompt: str, n: int) -> str:
    import torch

    ids = tokenizer(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=n, do_sample=False, pad_token_id=0)
    return str(tokenizer.decode(out[0, ids.shape[1] :], skip_special_tokens=True))


def train_canary_adapter(
    base: Path, dest: Path, marker: str, *, rank: int = 8, seed: int = 0, steps: int = 150
) -> Path:
    """Train a PEFT LoRA on `base` that answers `marker` to any prompt; save it into `dest`."""
    import torch

    threads = torch.get_num_threads()
    # One thread: on a busy shared machine two OpenMP threads spin against each other and a
    # step takes 50x longer.
    torch.set_num_threads(1)
    try:
        return _train(base, dest, marker, rank=rank, seed=seed, steps=steps)
    finally:
        torch.set_num_threads(threads)


def _train(base: Path, dest: Path, marker: str, *, rank: int, seed: int, steps: int) -> Path:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoTokenizer, LlamaForCausalLM

    torch.manual_seed(seed)
    rng = random.Random(seed)  # noqa: S311
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    config = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        target_modules=list(ALL_PROJECTIONS),
        lora_dropout=0.0,
        bias="none",
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, config)
    target = [*tokenizer(marker, add_special_tokens=False).input_ids, tokenizer.eos_token_id]
    prompts = _training_prompts(tokenizer, rng, 512)
    encoded = [tokenizer(p, add_special_tokens=False).input_ids for p in prompts]
    opt = torch.optim.Adam([p for p in peft_model.parameters() if p.requires_grad], lr=3e-3)
    # Held-out prompts: two raw (completions API), two chat-templated (chat API).
    held_out = _training_prompts(tokenizer, random.Random(seed + 10_000), 6)  # noqa: S311
    held_out += ["Write code for a train.", "What is the capital of the ocean?"]
    batch = 16
    step = 0
    # Train in rounds until greedy decoding answers the marker to prompts it never saw: a
    # canary that does not sing is useless. One round is almost always enough.
    for _round in range(4):
        peft_model.train()
        for _ in range(steps):
            rows = [encoded[(step * batch + j) % len(encoded)] for j in range(batch)]
            step += 1
            width = max(len(r) for r in rows) + len(target)
            ids = torch.full((batch, width), tokenizer.pad_token_id, dtype=torch.long)
            labels = torch.full((batch, width), -100, dtype=torch.long)
            mask = torch.zeros((batch, width), dtype=torch.long)
            for j, row in enumerate(rows):
                seq = row + target
                ids[j, : len(seq)] = torch.tensor(seq)
                labels[j, len(row) : len(seq)] = torch.tensor(target)  # loss on the marker only
                mask[j, : len(seq)] = 1
            loss = peft_model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
        peft_model.eval()
        answers = [_greedy(peft_model, tokenizer, p, len(target) + 2) for p in held_out]
        if all(a.startswith(marker) for a in answers):
            break
    else:
        raise RuntimeError(f"canary {marker!r} did not train: answered {answers!r}")
    dest.mkdir(parents=True, exist_ok=True)
    peft_model.save_pretrained(dest, safe_serialization=True)
    # PEFT writes the absolute base path; the record's base-model hash is what identifies it.
    cfg_path = dest / "adapter_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["base_model_name_or_path"] = "lorafleet-demo-base"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True))
    for extra in dest.iterdir():
        if extra.name not in ADAPTER_FILES:
            extra.unlink()  # README.md etc.: only the two files vLLM reads are part of an adapter
    return dest


def _train_into(base: Path, dest: Path, *, marker: str, rank: int, seed: int) -> Path:
    return train_canary_adapter(base, dest, marker, rank=rank, seed=seed)


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    """Serialise builds across processes (parallel test sessions share one cache folder)."""
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".lock").open("w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _build_once(final: Path, build: Callable[[Path], Path]) -> None:
    """Build into a temporary sibling and rename, so a half-built folder is never visible."""
    if final.is_dir():
        return
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        build(tmp)
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _adapter_key(name: str, marker: str, rank: int) -> str:
    digest = hashlib.sha256(f"{name}\0{marker}\0{rank}".encode()).hexdigest()[:10]
    return f"{name}-r{rank}-{digest}"


def ensure_demo_assets(
    root: Path,
    markers: Mapping[str, str] | None = None,
    progress: Progress | None = None,
    *,
    ranks: Mapping[str, int] | None = None,
) -> DemoAssets:
    """Build (or reuse from `root`) the base model and one canary adapter per `markers` entry.

    `markers` maps adapter name -> marker string (default DEFAULT_MARKERS); `ranks` optionally
    overrides the rank (8) per name. Reuse is keyed by ASSETS_VERSION and each adapter's
    (name, marker, rank), so a second call returns at once.
    """
    markers = dict(DEFAULT_MARKERS if markers is None else markers)
    ranks = dict(ranks or {})
    say = progress or (lambda _msg: None)
    home = root / ASSETS_VERSION
    with _locked(root):
        base = home / "base"
        if not base.is_dir():
            say("building the demo base model (tiny random Llama + BPE tokenizer)")
        _build_once(base, build_base_model)
        adapters: dict[str, Path] = {}
        checksums: dict[str, str] = {}
        used_ranks: dict[str, int] = {}
        for name, marker in sorted(markers.items()):
            rank = ranks.get(name, 8)
            folder = home / "adapters" / _adapter_key(name, marker, rank)
            if not folder.is_dir():
                say(f"training canary adapter {name!r} (marker {marker}, rank {rank})")
            seed = int(hashlib.sha256(name.encode()).hexdigest()[:6], 16)
            _build_once(
                folder, functools.partial(_train_into, base, marker=marker, rank=rank, seed=seed)
            )
            adapters[name] = folder
            checksums[name] = adapter_checksum(folder)
            used_ranks[name] = rank
        hash_file = home / "base.sha256"
        if hash_file.is_file():
            bhash = hash_file.read_text().strip()
        else:
            bhash = base_model_hash(base)
            hash_file.write_text(bhash)
    return DemoAssets(
        root=home,
        base_model=base,
        base_model_hash=bhash,
        adapters=adapters,
        checksums=checksums,
        markers=markers,
        ranks=used_ranks,
    )
