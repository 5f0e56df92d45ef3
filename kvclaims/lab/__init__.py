"""kvclaims.lab: the runs that exercise the runtimes and turn them into evidence.

Scenarios, lanes, fuzzers, repetitions and descriptor generation: everything that drives a
runtime from outside and checks what it wrote. This is the one place below the CLI where
importing `kvclaims.refinement` is legitimate.

- `seed_cases`: the seeds' cases, each defined once (inputs, expected numbers, seed section,
  lanes); every lane below takes a case's inputs from it and reports its numbers;
- `micro_scenarios`, `scenario_file`, `micro_fuzzing`: the MicroRuntime lane: its scenarios,
  user scenario files and the Hypothesis state machines that fuzz it against the checker;
- `scheduler_lane`, `scheduler_scenarios`, `scheduler_fuzzing`: vLLM's real scheduler driven
  step by step with fabricated model outputs, its scenarios and its Hypothesis fuzzer;
- `engine_lane`, `engine_scenarios`, `tiny_model`, `kv_events`: `vllm.LLM` end to end on a tiny
  local model, its scenarios and the KV-event capture;
- `repeat`, `vllm_descriptor`: repeated engine-lane runs and the descriptor generated from them;
- `fuzz_settings`: the Hypothesis settings every machine here runs under.
"""
