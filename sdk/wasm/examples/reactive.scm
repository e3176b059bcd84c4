;; Pattern 3, reactive, as a wasm agent (reactive.c).
(spawn-agent
  (purpose "upper-case the texts it is sent")
  (sandbox wasm)
  (capabilities (receive (from "*")) (send (agent "*")))
  (constraints (max-runtime 3600)))
