(agent
  (id "agent-2026-001")
  (spawned-by user-principal)
  (purpose "Monitor RSS feeds and archive new papers")
  (capabilities
    (read (url "https://arxiv.org/rss/*"))
    (write (path "/vault/papers/"))
    (network (hosts ("arxiv.org" "doi.org"))))
  (constraints
    (max-runtime (* 24 3600))  ; 24 hours
    (max-memory (* 512 1024 1024))  ; 512MB
    (max-storage (* 1 1024 1024 1024)))  ; 1GB
  (sandbox posix-sandbox)
  (status running))
