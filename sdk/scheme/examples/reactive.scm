;; Pattern 3, reactive, as a Scheme agent: the RFC's code as written, with handle-message defined
;; around it. A "task" message names a file of /vault/tasks/; the agent writes its text upper-cased
;; to /vault/results/ under the same name. It runs until it is terminated.
;;
;;   vaultctl agent spawn sdk/scheme/examples/reactive.scm --as owner.key
;;   vaultctl agent send worker --type task --data name.txt   (a file holding "t1.txt")
(spawn-agent
  (name worker)
  (groups worker-agents)
  (purpose "upper-case the task files it is sent")
  (code
   '(let ()
      (define (handle-message msg)
        (let ((type (cdr (assq 'type msg)))
              (name (utf8->string (cdr (assq 'data msg)))))
          (when (equal? type "task")
            (write-file (string-append "/vault/results/" name)
                        (string-upcase
                         (utf8->string (read-file (string-append "/vault/tasks/" name)))))
            (log "did " name " for " (cdr (assq 'from msg))))))
      (lambda ()
        (let loop ()
          (let ((msg (agent-receive timeout: 60000)))
            (when msg
              (handle-message msg))
            (loop))))))
  (capabilities
    (receive (from supervisor-agent))
    (send (to worker-agents))
    (read "/vault/tasks/")
    (write "/vault/results/"))
  (constraints
    (max-runtime #f)  ; runs until terminated
    (max-memory (* 256 1024 1024))))
