"""Plain words for the labels, outcomes and mode names a report shows, each said once.

A report prints the entries it uses in a "What the words mean" section; the references it cites
are section names of the documents that ship with kvclaims (the README, `descriptors/README.md`).
"""

from __future__ import annotations

LABELS: dict[str, str] = {
    "native_sound": "the runtime itself supplies every obligation the mode needs, with anchored evidence",
    "sound_with_adapter": "the mode holds once an adapter of the named depth is added, and the "
    "evidence shows that adapter's preconditions",
    "approximate": "the runtime has a primitive that resembles the mode (a priority, a pin, a TTL) but not "
    "the obligations behind it",
    "unknown": "not enough evidence either way",
    "rejected": "evidence shows an obligation the mode cannot do without is missing",
    "invalid": "the row asks for something impossible (for example a depth the descriptor does not have)",
}
"""The lowering judgment's labels, strongest first."""

OUTCOMES: dict[str, str] = {
    "accepted": "every step of the trace is a legal move of the model",
    "rejected": "a step breaks a rule of the model; the report names the rule",
    "inconclusive": "the checker could not decide (for example an event type it does not know)",
    "invalid": "the file is not a well-formed trace",
}
"""Refinement outcomes of a trace."""

MODES: dict[str, str] = {
    "best_effort": "the runtime reports what happened to the prefix but promises nothing",
    "soft_priority": "the prefix outranks others when blocks are evicted",
    "hard_protected": "the prefix stays; a request that would need its blocks is refused, naming the claim",
    "demotable": "the prefix may be demoted to ordinary cache first, and only then lost",
    "expiring": "the prefix is kept until a stated deadline",
    "offloadable": "the prefix may move to a slower tier and must be restored, or its failure reported",
    "routed_reuse": "a router sends requests to where the prefix is kept",
}
"""What each protection mode promises, in a sentence."""

OTHER_WORDS: dict[str, str] = {
    "depth": "how deep an adapter reaches into the runtime, from none (reading its telemetry) to a patch "
    "of its backend",
    "control": "a deliberately broken run (its name starts with control-): it must NOT be accepted, "
    "which shows the checker can tell",
}

DOCS = (
    'The vocabulary is explained in the README section "Vocabulary in one paragraph"; how '
    "evidence counts and how a row is judged in `descriptors/README.md`."
)
