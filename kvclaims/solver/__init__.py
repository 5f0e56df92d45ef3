"""kvclaims.solver: the contract as a Z3 model, its named proofs, and adversarial search.

Depends on `kvclaims.spec` and `kvclaims.statemachine` only (the refinement checker that
judges adversarial traces is passed in by the CLI). Every model here is built by iterating over
the tables of `kvclaims.spec.tables` and the transition tables of `kvclaims.statemachine`; none
restates a fact. Modules, one concern each:

- `z3env`: one `Job` per solver task (fresh `z3.Context`, fixed seeds, an `rlimit` on every
  solver), so results are reproducible for the pinned z3 version.
- `facts`: the tables the models read, as one value (a planted bug is a modified copy).
- `symbolic`: a finite symbolic descriptor (a `Layout` of evidence sites plus Z3 variables),
  its decoding into a real `Descriptor` and the encoding of a concrete one.
- `lowering_model`: `kvclaims.spec.lower` as Z3 terms over a symbolic descriptor.
- `lifecycle_model`, `capacity_model`: the claim and request machines as transition relations,
  and the capacity arithmetic of refusals.
- `engines`: validity, Spacer/CHC invariants (re-checked), k-induction and BMC.
- `proofs` (+ `lowering_proofs`, `lifecycle_proofs`, `capacity_proofs`, registered in
  `obligations`), `report`: the named
  proof obligations and the committed `proofs/` directory.
- `parallel`: independent solver tasks on several cores, results in order; `upgrade_cache`:
  the native-upgrade search per descriptor, cached in the user cache directory.
- `differential`: Z3-driven search for descriptors the model and `lower` judge differently.
- `positives`, `adversary`: near-miss descriptors of the positive rows that must fail closed.
- `traces`: adversarial traces by bounded model checking.
- `upgrades`: what would make each runtime native (`z3.Optimize`).
- `planted`: a deliberately permissive table, for the self-tests.
"""
