"""Re-export: the retired-id set lives with the system model that keeps it."""

from kvclaims.statemachine.ids import RetiredIds

__all__ = ["RetiredIds"]
