;; Pattern 1, periodic, as a Scheme agent: the RFC's code as written, with perform-task defined
;; around it. Each round copies the feed files that are not archived yet from /vault/feeds/ to
;; /vault/archive/, then the agent sleeps an hour.
;;
;;   vaultctl agent spawn sdk/scheme/examples/periodic.scm --as owner.key
(spawn-agent
  (name archiver)
  (purpose "archive new feed files every hour")
  (code
   '(let ()
      (define (archived) (list-directory "/vault/archive"))
      (define (perform-task)
        (let* ((done (archived))
               (new (filter (lambda (n) (not (member n done))) (list-directory "/vault/feeds"))))
          (for-each (lambda (n)
                      (write-file (string-append "/vault/archive/" n)
                                  (read-file (string-append "/vault/feeds/" n))))
                    new)
          (log "archived " (length new) " new: " (string-join new " "))))
      (lambda ()
        (let loop ()
          (perform-task)
          (sleep 3600)  ; hourly
          (loop)))))
  (capabilities
    (read "/vault/feeds/")
    (read "/vault/archive/")
    (write "/vault/archive/"))
  (constraints
    (max-runtime (* 30 24 3600))  ; 30 days
    (max-memory (* 128 1024 1024))))
