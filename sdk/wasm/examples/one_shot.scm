;; Pattern 2, one-shot, as a wasm agent (one_shot.c): the input's digest is the initial state.
(spawn-agent
  (purpose "count the words of one object")
  (sandbox wasm)
  (capabilities (cas-read) (cas-write))
  (constraints (max-runtime 60) (max-steps 1000000000)))
