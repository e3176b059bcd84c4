;; Pattern 1, periodic, as a wasm agent (periodic.c): a round every 60 s, three rounds.
(spawn-agent
  (purpose "store a record of each round")
  (sandbox wasm)
  (args "60" "3")
  (capabilities (cas-write) (receive (from "*")))
  (constraints (max-runtime 600)))
