"""Record an SGLang KV-event capture with SGLang's own serializer and publisher (no engine).

SGLang does not run on these CPU machines, but its event module imports without the engine:
this script loads `sglang/srt/disaggregation/kv_events.py` from an unpacked SGLang wheel
(`pip download --no-deps sglang==0.5.23`, then unzip it), builds the batches of a scenario with
SGLang's `KVEventBatch` / `BlockStored` / `BlockRemoved` / `AllBlocksCleared`, and publishes them
with SGLang's `ZmqEventPublisher` to kvclaims's loopback `KvEventCapture`, which writes the
frames `kvclaims check --format sglang-kv-events` reads. The two module-level imports that
need the rest of SGLang (`runtime_context`, `utils.network`) are only used by the publisher's
configuration helpers and are stubbed.

    python tools/sglang_capture.py UNPACKED_WHEEL_DIR OUT.kvevents
"""

from __future__ import annotations

import importlib.util
import sys
import time
import types
from pathlib import Path
from typing import Any

from kvclaims.lab.kv_events import KvEventCapture

PAGE = 4
CLAIM_TOKENS = list(range(100, 108))  # two pages of the registered claim
OTHER_TOKENS = [7, 7, 7, 7]


def load_sglang_events(root: Path) -> Any:
    """SGLang's kv_events module from an unpacked wheel, its engine-only imports stubbed."""
    stubs = {
        "sglang": {},
        "sglang.srt": {},
        "sglang.srt.runtime_context": {"get_parallel": None},
        "sglang.srt.utils": {},
        "sglang.srt.utils.network": {"NetworkAddress": object},
    }
    for name, attributes in stubs.items():
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules.setdefault(name, module)
    path = root / "sglang" / "srt" / "disaggregation" / "kv_events.py"
    spec = importlib.util.spec_from_file_location("sglang_kv_events_upstream", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def scenario(sgl: Any) -> list[Any]:
    """A claim's two pages stored (one coalesced store), an unrelated page, a HiCache host
    backup of the claim's pages, the second page evicted from the GPU and stored again, then a
    reset. Hashes are arbitrary 63-bit integers, as `hash_str_to_int64` yields."""
    gpu, host = sgl.StorageMedium.GPU, sgl.StorageMedium.CPU
    h0, h1, other = 0x1111, 0x2222, 0x3333

    def stored(hashes: list[int], parent: int | None, tokens: list[int], medium: Any) -> Any:
        return sgl.BlockStored(
            block_hashes=hashes,
            parent_block_hash=parent,
            token_ids=tokens,
            block_size=PAGE,
            lora_id=None,
            medium=medium,
        )

    events = [
        [stored([h0, h1], None, CLAIM_TOKENS, gpu)],
        [stored([other], None, OTHER_TOKENS, gpu)],
        [stored([h0, h1], None, CLAIM_TOKENS, host)],
        [sgl.BlockRemoved(block_hashes=[h1], medium=gpu)],
        [stored([h1], h0, CLAIM_TOKENS[PAGE:], gpu)],
        [sgl.AllBlocksCleared()],
    ]
    return [sgl.KVEventBatch(ts=1_000.0 + i, events=batch) for i, batch in enumerate(events)]


def record(root: Path, out: Path) -> int:
    sgl = load_sglang_events(root)
    capture = KvEventCapture()
    publisher = sgl.ZmqEventPublisher(
        attn_dp_rank=0, endpoint=capture.endpoint, topic=capture.topic, bind=False
    )
    try:
        time.sleep(0.5)  # a PUB socket drops what it sends before the subscriber is connected
        capture.record(out)
        for batch in scenario(sgl):
            publisher.publish(batch)
        time.sleep(1.0)  # the publisher sends from its own thread
        frames = capture.stop(quiet_seconds=0.5)
    finally:
        publisher.shutdown()
        capture.close()
    return frames


if __name__ == "__main__":
    frames = record(Path(sys.argv[1]), Path(sys.argv[2]))
    print(f"{frames} frames written to {sys.argv[2]}")
