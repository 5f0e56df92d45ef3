"""Two-key checkpoints: payload equality and value equality are different questions (seed 002)."""

from __future__ import annotations

from kvclaims.statemachine.checkpoint import HybridCheckpoint, Layout, restore


def test_an_untouched_checkpoint_restores_to_the_recorded_value() -> None:
    checkpoint = HybridCheckpoint.take("session", 16)
    result = restore(checkpoint)
    assert result.phases == ("payload->scratch", "scratch->live", "live->post_restore_view")
    assert result.payload_hash == checkpoint.payload_hash
    assert result.matches(checkpoint.value_hash)


def test_an_in_place_layout_mutation_keeps_the_payload_hash_and_changes_the_value() -> None:
    checkpoint = HybridCheckpoint.take("session", 16)
    recorded = checkpoint.value_hash
    checkpoint.mutate_layout_in_place()
    assert checkpoint.layout is Layout.column_major
    result = restore(checkpoint)
    assert result.payload_hash == checkpoint.payload_hash
    assert not result.matches(recorded)


def test_checkpoints_are_deterministic_per_object_and_boundary() -> None:
    assert HybridCheckpoint.take("a", 4).recorded() == HybridCheckpoint.take("a", 4).recorded()
    assert HybridCheckpoint.take("a", 4).value_hash != HybridCheckpoint.take("a", 8).value_hash
