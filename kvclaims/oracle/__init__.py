"""An independent oracle for kvclaims trace v1 (issue 12): a brute-force reference interpreter
(`interpreter`), a bounded-exhaustive comparison with the refinement checker (`exhaustive`) and
single-mutation comparisons (`mutations`)."""

from kvclaims.oracle.interpreter import Verdict, judge

__all__ = ["Verdict", "judge"]
