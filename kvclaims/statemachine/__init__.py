"""kvclaims.statemachine: the claim lifecycle as executable semantics."""
