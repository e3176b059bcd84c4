;; Pattern 4, mobile, as a wasm agent (mobile.c): the route is the initial state.
(spawn-agent
  (purpose "visit the vaults of the route and come home")
  (sandbox wasm)
  (capabilities (cas-write) (migrate (vaults vault-a vault-b vault-c)))
  (constraints (max-runtime 600) (max-migrations 4)))
