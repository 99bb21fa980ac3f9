"""`lorafleet up` with no arguments: a self-contained demo, built offline.

Builds (once; later starts reuse it) a tiny random Llama and canary adapters that answer their
marker strings, copies the adapters into the local `file://` object store, writes the
manifests a user would `kubectl apply` (a ReplicaPool, one LoRAAdapter and one AdapterAlias per
adapter, the demo tenant's key Secret holding only a hash), and prints how to call it.
"""

from __future__ import annotations

import contextlib
import io
import os
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lorafleet_core.api.adapter_manifest import adapter_object_name, build_adapter
from lorafleet_core.api.apikeys import TenantKeys, generate_key, hash_key
from lorafleet_core.api.models import (
    AdapterAlias,
    AdapterAliasSpec,
    BaseModelRef,
    CacheSpec,
    EngineSpec,
    ObjectMeta,
    ReplicaBounds,
    ReplicaPool,
    ReplicaPoolSpec,
)
from lorafleet_core.storage import objectstore
from lorafleet_core.storage.adapter_files import inspect_adapter
from lorafleet_core.storage.manifests import atomic_write, file_name_for, write_object
from lorafleet_core.storage.swap import WriteConflict, swap_in_folder

DEMO_TENANT = "demo"
DEMO_POOL = "demo"
DEMO_VERSION = "v1"
KEY_FILE = "demo-api-key"


@dataclass(frozen=True)
class DemoSetup:
    manifests_dir: Path
    pool_name: str
    api_key: str
    models: dict[str, str]  # public model -> marker


def assets_root(state_dir: Path) -> Path:
    """Where demo assets are built; LORAFLEET_DEMO_ASSETS shares one cache between folders."""
    env = os.environ.get("LORAFLEET_DEMO_ASSETS")
    return Path(env) if env else state_dir / "demo-assets"


def build_assets(state_dir: Path, *, progress: bool = True) -> Any:
    """Build or reuse the demo model and adapters, with a progress bar over the steps."""
    from tqdm import tqdm

    from lorafleet_demo.assets import DEFAULT_MARKERS, ensure_demo_assets

    # One progress bar for the whole build: Hugging Face's own per-file bars would interleave.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    steps = 1 + len(DEFAULT_MARKERS)
    with tqdm(total=steps, desc="demo assets", unit="step", disable=not progress) as bar:
        done = {"n": 0}

        def on_step(message: str) -> None:
            # Called before each step that has to be built; what was already there is skipped.
            if done["n"]:
                bar.update(1)
            done["n"] += 1
            bar.set_description(message[:60])

        # Training prints its loss curve; keep the console to the progress bar.
        with contextlib.redirect_stdout(io.StringIO()):
            assets = ensure_demo_assets(assets_root(state_dir), progress=on_step)
        bar.set_description("demo assets ready")
        bar.update(steps - bar.n)
    return assets


def _write_if_absent(folder: Path, body: dict[str, Any]) -> None:
    # Never overwrite a demo manifest the user has edited since the first start, nor an object
    # of that name another writer (`lorafleet alias set`, the control API) created in any file
    # meanwhile: a create, checked and written under the folder's lock.
    if not (folder / file_name_for(body["kind"], body["metadata"]["name"])).exists():
        with contextlib.suppress(WriteConflict):
            swap_in_folder(folder, body, None)


def demo_pool(base_model: Path, base_hash: str, replicas: int, store: str) -> ReplicaPool:
    return ReplicaPool(
        metadata=ObjectMeta(name=DEMO_POOL),
        spec=ReplicaPoolSpec(
            base_model=BaseModelRef(
                name="lorafleet-demo-base", hash=base_hash, uri=f"file://{base_model.resolve()}"
            ),
            # Small numbers: a CPU laptop, a 2-layer model, a handful of adapters.
            engine=EngineSpec(gpu_slots=4, host_ram_slots=8, max_rank=16, max_model_len=256),
            replicas=ReplicaBounds(min=1, max=max(replicas, 1), desired=replicas),
            owners_per_adapter=2,
            cache=CacheSpec(disk_bytes=2**30),
            # Secure by default: every demo adapter lives under <store>/<tenant>/, so a manifest
            # pointing anywhere else (another tenant's files, a path) is Rejected.
            adapter_sources=[store],
        ),
    )


def ensure_api_key(state_dir: Path, manifests_dir: Path) -> str:
    """The demo tenant's key: created once, kept (0600) in the state dir for the examples."""
    key_file = state_dir / KEY_FILE
    if key_file.is_file():
        key = key_file.read_text().strip()
    else:
        key = generate_key()
        atomic_write(key_file, key + "\n")
        key_file.chmod(stat.S_IRUSR | stat.S_IWUSR)
    secret = TenantKeys(tenant=DEMO_TENANT, key_hashes=(hash_key(key),)).to_secret()
    write_object(manifests_dir, secret)  # idempotent; repairs a deleted Secret file
    return key


def prepare_demo(
    state_dir: Path, manifests_dir: Path, *, replicas: int, progress: bool = True
) -> DemoSetup:
    assets = build_assets(state_dir, progress=progress)
    store = objectstore.parse_store_uri(objectstore.default_store(state_dir))
    manifests_dir.mkdir(parents=True, exist_ok=True)
    pool = demo_pool(assets.base_model, assets.base_model_hash, replicas, str(store))
    _write_if_absent(manifests_dir, pool.wire())
    models: dict[str, str] = {}
    for name, folder in sorted(assets.adapters.items()):
        dest = store.child(DEMO_TENANT, name, DEMO_VERSION)
        weights_uri = str(dest)
        if not (Path(dest.path) / "adapter_model.safetensors").is_file():
            weights_uri = objectstore.upload_adapter(folder, dest, progress=False)
        object_name = adapter_object_name(DEMO_TENANT, name, DEMO_VERSION)
        info = inspect_adapter(folder)
        adapter = build_adapter(
            object_name=object_name,
            tenant=DEMO_TENANT,
            version=DEMO_VERSION,
            rank=info.rank,
            alpha=info.alpha,
            target_modules=info.target_modules,
            size_bytes=info.size_bytes,
            base_hash=assets.base_model_hash,
            weights_uri=weights_uri,
            checksum=assets.checksums[name],
            adapter_name=name,
        )
        _write_if_absent(manifests_dir, adapter.wire())
        model = f"{DEMO_TENANT}/{name}:prod"
        alias = AdapterAlias(
            metadata=ObjectMeta(name=f"{DEMO_TENANT}-{name}-prod"),
            spec=AdapterAliasSpec(model=model, tenant=DEMO_TENANT, adapter=object_name),
        )
        _write_if_absent(manifests_dir, alias.wire())
        models[model] = assets.markers[name]
    key = ensure_api_key(state_dir, manifests_dir)
    return DemoSetup(manifests_dir, DEMO_POOL, key, models)


def usage_text(base_url: str, key_file: Path, models: Mapping[str, str]) -> str:
    """How to call the demo, printed once everything is ready."""
    first = next(iter(models), "demo/zebra:prod")
    lines = [
        "",
        f"lorafleet is serving on {base_url}/v1  (Ctrl-C stops everything)",
        "models (each answers with its marker):",
        *(f"  {m:<22} -> {marker}" for m, marker in models.items()),
        "",
        "curl:",
        f"  curl -s {base_url}/v1/chat/completions \\",
        f'    -H "Authorization: Bearer $(cat {key_file})" -H "Content-Type: application/json" \\',
        f'    -d \'{{"model": "{first}", "max_tokens": 8, "temperature": 0, '
        '"messages": [{"role": "user", "content": "hello"}]}\'',
        "",
        "python (openai client):",
        "  from openai import OpenAI",
        f'  client = OpenAI(base_url="{base_url}/v1", api_key=open("{key_file}").read().strip())',
        f'  r = client.chat.completions.create(model="{first}", max_tokens=8, temperature=0,',
        '      messages=[{"role": "user", "content": "hello"}])',
        "  print(r.choices[0].message.content)",
        "",
    ]
    return "\n".join(lines)
