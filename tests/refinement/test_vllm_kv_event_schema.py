"""vLLM's whole KV-event schema: every field of the installed vLLM's event Structs is one the
reader reads, and each field's rule for claims holds against a hostile capture (false
residency is never accepted).

Captures are encoded with the installed vLLM's own `BlockStored` / `BlockRemoved` /
`KVEventBatch` where vLLM is installed (the rules' captures use maps, as the publisher does)."""

from __future__ import annotations

import io
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from support.kv_registry import BLOCK, TOKENS, registry, write_registry
from support.vllm_events import stored

from kvclaims.refinement import Outcome, check_trace
from kvclaims.refinement.abstractions.vllm_kv_events import READ_FIELDS, KvEventsSource

H0, H1 = b"\x01" * 8, b"\x02" * 8


def prefix(**fields: Any) -> dict[str, Any]:
    """The registry's whole claim prefix (two blocks) in one store."""
    return stored([H0, H1], TOKENS, **fields)


WINDOW = prefix(group_idx=1, kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=4 * BLOCK)
"""A sliding-window group's store of the prefix, all of it within the window."""


def capture(*batches: list[dict[str, Any]], rank: int | None = 0) -> bytes:
    frames = []
    for seq, events in enumerate(batches):
        payload = msgspec.msgpack.encode({"ts": 1.0 + seq, "events": events, "data_parallel_rank": rank})
        frames.append(struct.pack(">QI", seq, len(payload)) + payload)
    return b"".join(frames)


def steps(tmp_path: Path, data: bytes, **overrides: Any) -> list[dict[str, Any]]:
    path = write_registry(tmp_path, registry(**overrides))
    source = KvEventsSource(io.BytesIO(data), registry=path)
    out: list[dict[str, Any]] = []
    for _, _, event in source.events():
        out.append(msgspec.to_builtins(event))
    return out


def materialized(tmp_path: Path, data: bytes, **overrides: Any) -> bool:
    return any(s.get("event") == "resident_claim_materialized" for s in steps(tmp_path, data, **overrides))


def verdict(tmp_path: Path, data: bytes, **overrides: Any) -> Any:
    trace = tmp_path / "capture.kvevents"
    trace.write_bytes(data)
    return check_trace(trace, registry=write_registry(tmp_path, registry(**overrides)))


# -- the schema, from the installed vLLM ------------------------------------------------------------


def test_the_reader_reads_every_field_of_the_installed_vllms_event_structs() -> None:
    kv_events = pytest.importorskip("vllm.distributed.kv_events", reason="needs vLLM (the vllm lanes)")
    for name, read in READ_FIELDS.items():
        theirs = getattr(kv_events, name).__struct_fields__
        missing = [field for field in theirs if field not in read]
        assert not missing, f"vLLM's {name} has fields the reader does not handle: {missing}"
    documented = (Path(__file__).parents[2] / "docs" / "vllm-binding.md").read_text()
    for name, read in READ_FIELDS.items():
        for field in read:
            assert f"| `{name}` | `{field}` |" in documented, f"{name}.{field} is not in the field table"


def test_a_capture_encoded_by_the_installed_vllm_is_read(tmp_path: Path) -> None:
    kv_events = pytest.importorskip("vllm.distributed.kv_events", reason="needs vLLM (the vllm lanes)")
    event = kv_events.BlockStored(
        block_hashes=[H0, H1],
        parent_block_hash=None,
        token_ids=TOKENS,
        block_size=BLOCK,
        lora_id=None,
        medium="GPU",
        lora_name=None,
        group_idx=0,
        session_id="session-7",
    )
    payload = msgspec.msgpack.encode(kv_events.KVEventBatch(ts=1.0, events=[event], data_parallel_rank=0))
    data = struct.pack(">QI", 0, len(payload)) + payload
    assert materialized(tmp_path, data)
    assert verdict(tmp_path, data).outcome is Outcome.accepted


def test_an_unknown_field_fails_closed_naming_it(tmp_path: Path) -> None:
    result = verdict(tmp_path, capture([prefix(residency_hint="trust me")]))
    assert result.outcome is Outcome.inconclusive
    assert "residency_hint" in result.reason


def test_an_unknown_batch_field_fails_closed_naming_it(tmp_path: Path) -> None:
    payload = msgspec.msgpack.encode({"ts": 1.0, "events": [prefix()], "data_parallel_rank": 0, "tier": "x"})
    result = verdict(tmp_path, struct.pack(">QI", 0, len(payload)) + payload)
    assert result.outcome is Outcome.inconclusive and "tier" in result.reason


# -- which groups make a claim resident ---------------------------------------------------------------


def test_a_full_attention_group_makes_the_claim_resident(tmp_path: Path) -> None:
    assert materialized(tmp_path, capture([prefix(group_idx=0, kv_cache_spec_kind="full_attention")]))


def test_a_mamba_groups_store_is_never_kv_residency(tmp_path: Path) -> None:
    data = capture([prefix(group_idx=1, kv_cache_spec_kind="mamba")])
    assert not materialized(tmp_path, data)
    stored_levels = {s["cache_level"] for s in steps(tmp_path, data) if s.get("event") == "block_stored"}
    assert stored_levels == {"gpu-state"}


def test_a_sliding_window_group_counts_only_within_its_window(tmp_path: Path) -> None:
    narrow = capture(
        [prefix(group_idx=0, kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=BLOCK)]
    )
    wide = capture(
        [prefix(group_idx=0, kv_cache_spec_kind="sliding_window", kv_cache_spec_sliding_window=4 * BLOCK)]
    )
    assert not materialized(tmp_path, narrow)  # the window holds one block of the two-block prefix
    assert materialized(tmp_path, wide)


def test_a_window_store_without_a_window_fails_closed(tmp_path: Path) -> None:
    result = verdict(tmp_path, capture([prefix(group_idx=0, kv_cache_spec_kind="sliding_window")]))
    assert result.outcome is Outcome.inconclusive


@pytest.mark.parametrize(
    "fields",
    [{"locality": "REMOTE"}, {"medium": "CPU"}, {"ownership": "tier-2"}],
    ids=["remote-locality", "cpu-medium", "secondary-tier-ownership"],
)
def test_another_tier_is_not_device_residency(tmp_path: Path, fields: dict[str, Any]) -> None:
    assert not materialized(tmp_path, capture([prefix(**fields)]))


def test_an_unknown_locality_fails_closed(tmp_path: Path) -> None:
    assert verdict(tmp_path, capture([prefix(locality="NEARBY")])).outcome is Outcome.inconclusive


def test_an_unknown_spec_kind_fails_closed(tmp_path: Path) -> None:
    result = verdict(tmp_path, capture([prefix(group_idx=0, kv_cache_spec_kind="unknown")]))
    assert result.outcome is Outcome.inconclusive and "unknown" in result.reason


def test_removals_are_matched_by_group(tmp_path: Path) -> None:
    kv = prefix(group_idx=0, kv_cache_spec_kind="full_attention")
    state = prefix(group_idx=1, kv_cache_spec_kind="mamba")
    state_gone = {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU", "group_idx": 1}
    kv_gone = {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU", "group_idx": 0}
    events = [s.get("event") for s in steps(tmp_path, capture([kv, state], [state_gone], [kv_gone]))]
    assert events.count("resident_claim_materialized") == 1
    assert events.count("resident_claim_lost") == 1
    lost_after = events.index("resident_claim_lost")
    assert events[lost_after - 1] == "block_removed"  # the attention group's removal, not the state's
    # only the attention group's removal: still resident after the state group's
    assert materialized(tmp_path, capture([kv, state], [state_gone]))
    held = [s.get("event") for s in steps(tmp_path, capture([kv, state], [state_gone]))]
    assert "resident_claim_lost" not in held


def test_a_hybrid_models_groups_hold_one_content_per_position(tmp_path: Path) -> None:
    """An attention group and a sliding-window group store the same prefix (vLLM publishes one
    hash per position for every group): each position is one block in the steps, however many
    groups hold it."""
    data = capture([prefix(group_idx=0, kv_cache_spec_kind="full_attention"), WINDOW])
    stores = [s for s in steps(tmp_path, data) if s.get("event") == "block_stored"]
    assert [(s["position"], s["block_hash"]) for s in stores] == [
        (0, f"gpu:bytes:{H0.hex()}"),
        (1, f"gpu:bytes:{H1.hex()}"),
    ]
    assert len({s["block_id"] for s in stores}) == 2
    assert verdict(tmp_path, data).outcome is Outcome.accepted


@pytest.mark.parametrize("first_to_go", [0, 1])
def test_a_hybrid_position_is_lost_with_the_first_groups_block_to_go(
    tmp_path: Path, first_to_go: int
) -> None:
    """A prefix hit needs every group's block: one group's removal loses the position. Each
    group's block was its own holder in the steps before, so the model saw the other group's
    still holding it and rejected the join's true loss (a false reject of a hybrid capture)."""
    gone = {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU", "group_idx": first_to_go}
    data = capture([prefix(group_idx=0, kv_cache_spec_kind="full_attention"), WINDOW], [gone])
    events = [s.get("event") for s in steps(tmp_path, data)]
    assert events[-2:] == ["block_removed", "resident_claim_lost"]
    assert verdict(tmp_path, data).outcome is Outcome.accepted


def test_a_hybrid_position_is_back_only_when_every_group_holds_it_again(tmp_path: Path) -> None:
    """After both groups lost the second block, the attention group's store alone does not
    bring the claim back: the sliding-window group that held it holds it no more."""
    full = prefix(group_idx=0, kv_cache_spec_kind="full_attention")
    gone = [{"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU", "group_idx": g} for g in (0, 1)]
    data = capture([full, WINDOW], gone, [full])
    assert [s.get("event") for s in steps(tmp_path, data)].count("resident_claim_materialized") == 1
    back = capture([full, WINDOW], gone, [full, WINDOW])
    assert [s.get("event") for s in steps(tmp_path, back)].count("resident_claim_materialized") == 2
    assert verdict(tmp_path, back).outcome is Outcome.accepted


def test_a_reset_takes_each_hybrid_position_once_and_a_repeated_store_adds_no_step(tmp_path: Path) -> None:
    """A prefix-cache reset removes every group's blocks: each position leaves the device once.
    A group publishing its store again while it holds the prefix moves nothing."""
    full = prefix(group_idx=0, kv_cache_spec_kind="full_attention")
    data = capture([full, WINDOW], [full], [{"type": "AllBlocksCleared"}])
    events = steps(tmp_path, data)
    assert [s["event"] for s in events if s["event"].startswith("block_")] == [
        "block_stored",
        "block_stored",
        "block_removed",
        "block_removed",
    ]
    assert [s["position"] for s in events if s["event"] == "block_removed"] == [0, 1]
    assert [s["event"] for s in events][-1] == "resident_claim_lost"
    assert verdict(tmp_path, data).outcome is Outcome.accepted


def test_a_position_restored_with_another_hash_is_rejected(tmp_path: Path) -> None:
    """The prefix's second block is evicted and stored again, with the same tokens under
    another hash: the position holds other content than it was stored with."""
    gone = {"type": "BlockRemoved", "block_hashes": [H1], "medium": "GPU", "group_idx": 0}
    other = stored([b"\x09" * 8], TOKENS[BLOCK:], H0, group_idx=0)
    result = verdict(tmp_path, capture([prefix(group_idx=0)], [gone], [other]))
    assert result.outcome is Outcome.rejected and "block_identity" in result.reason


def test_an_unnamed_group_in_a_multi_group_stream_fails_closed(tmp_path: Path) -> None:
    data = capture([prefix(group_idx=0), prefix(group_idx=1)])
    assert verdict(tmp_path, data).outcome is Outcome.inconclusive


def test_a_group_renamed_from_attention_to_state_fails_closed(tmp_path: Path) -> None:
    data = capture([prefix(group_idx=0)], [prefix(group_idx=0, kv_cache_spec_kind="mamba")])
    assert verdict(tmp_path, data).outcome is Outcome.inconclusive


# -- cache identity -------------------------------------------------------------------------------


def test_the_salt_is_on_the_first_block_only(tmp_path: Path) -> None:
    salted = capture([prefix(extra_keys=[["tenant-a-salt"], None])])
    assert materialized(tmp_path, salted, **{"identity.namespace": "tenant-a-salt"})
    assert verdict(tmp_path, salted, **{"identity.namespace": "tenant-a-salt"}).outcome is Outcome.accepted


@pytest.mark.parametrize(
    "extra_keys",
    [[None, None], [["other-salt"], None], [["tenant-a-salt"], ["tenant-a-salt"]]],
    ids=["unsalted", "other-salt", "salt-on-a-later-block"],
)
def test_a_wrongly_salted_prefix_is_not_the_claims(tmp_path: Path, extra_keys: list[Any]) -> None:
    result = verdict(
        tmp_path, capture([prefix(extra_keys=extra_keys)]), **{"identity.namespace": "tenant-a-salt"}
    )
    assert result.outcome is not Outcome.accepted


def test_a_mid_chain_store_carries_no_salt(tmp_path: Path) -> None:
    first = stored([H0], TOKENS[:4], extra_keys=[["s"]])
    second = stored([H1], TOKENS[4:], parent=H0)
    assert materialized(tmp_path, capture([first], [second]), **{"identity.namespace": "s"})


def test_lora_identity_is_id_and_name_together(tmp_path: Path) -> None:
    both = capture([prefix(lora_id=3, lora_name="a", extra_keys=[["a"], ["a"]])])
    assert verdict(tmp_path, both, **{"identity.adapter_identity": "a#3"}).outcome is Outcome.accepted
    assert verdict(tmp_path, both, **{"identity.adapter_identity": "a#4"}).outcome is Outcome.inconclusive
    assert verdict(tmp_path, both).outcome is Outcome.inconclusive  # adapter-free registry
    id_only = capture([prefix(lora_id=3)])
    assert verdict(tmp_path, id_only).outcome is Outcome.inconclusive


def test_multimodal_extra_keys_are_part_of_the_block_identity(tmp_path: Path) -> None:
    image = capture([prefix(extra_keys=[[["img-sha", 0]], None])])
    assert verdict(tmp_path, image).outcome is Outcome.inconclusive


# -- attribution, hash input, streams ------------------------------------------------------------


def test_session_id_is_attribution_not_another_runtime(tmp_path: Path) -> None:
    data = capture([prefix(session_id="sess-1", group_idx=0)])
    assert verdict(tmp_path, data).outcome is Outcome.accepted
    assert materialized(tmp_path, data)


def test_lookahead_tokens_are_hash_input_not_the_claims_tokens(tmp_path: Path) -> None:
    # the first block's tokens plus lookahead that spells the claim's second block: one block only
    one = capture([stored([H0], TOKENS[:4], lookahead_token_ids=[TOKENS[4:]])])
    assert not materialized(tmp_path, one)
    both = capture([prefix(lookahead_token_ids=[[1], [2]])])
    assert materialized(tmp_path, both)
    short = capture([prefix(lookahead_token_ids=[[1]])])
    assert verdict(tmp_path, short).outcome is Outcome.inconclusive


def test_data_parallel_ranks_are_separate_streams(tmp_path: Path) -> None:
    frames = []
    for seq, rank in enumerate([0, 1]):
        payload = msgspec.msgpack.encode({"ts": 1.0, "events": [prefix()], "data_parallel_rank": rank})
        frames.append(struct.pack(">QI", seq, len(payload)) + payload)
    assert verdict(tmp_path, b"".join(frames)).outcome is Outcome.inconclusive
