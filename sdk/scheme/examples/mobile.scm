;; Pattern 4, mobile, as a Scheme agent: the RFC's code as written, its free names defined around
;; it. The agent reads the shopping list at home, moves to the vault that has the prices
;; (its initial state names it, e.g. "vault-b"), prices the list there, and brings the report
;; home, where its procedure returns it: the report is the agent's result.
;;
;;   vaultctl agent spawn sdk/scheme/examples/mobile.scm --as owner.key --state remote.txt
;;
;; The code after (migrate-to ...) runs on the remote vault: the vault there re-runs the code with
;; every host call answered from the agent's effect log (docs/replay.md), so the list is read
;; once, at home, and nothing before the hop is done again.
(spawn-agent
  (name shopper)
  (purpose "price the shopping list where the prices are, bring the report home")
  (code
   '(let ()
      (define (where)
        (let ((me (self-inspect)))
          (string-append (cdr (assq 'vault me)) " (hop "
                         (number->string (cdr (assq 'hop me))) ")")))
      (define (phase what) (log "phase " what " on " (where)))
      (define (lines text) (filter (lambda (l) (not (string-null? l))) (string-split text #\newline)))
      (define (fields line) (filter (lambda (w) (not (string-null? w))) (string-split line #\space)))
      (define remote-vault (utf8->string (get-state)))
      (define results #f)
      ;; At home: the list, as ((item count) ...).
      (define (gather-local-data)
        (phase "gather")
        (map fields (lines (utf8->string (read-file "/vault/pub/mobile/list.txt")))))
      ;; Where the prices are: the report.
      (define (process-remote data)
        (phase "price")
        (let* ((here (cdr (assq 'vault (self-inspect))))
               (prices (map fields (lines (utf8->string (read-file "/vault/pub/mobile/prices.txt")))))
               (total 0)
               (priced
                (map (lambda (item)
                       (let ((name (car item)) (count (cadr item)) (price (assoc (car item) prices)))
                         (if price
                             (let ((cost (* (string->number count) (string->number (cadr price)))))
                               (set! total (+ total cost))
                               (string-append name " " count " x " (cadr price) " = "
                                              (number->string cost) "\n"))
                             (string-append name " " count ": no price at " here "\n"))))
                     data)))
          (set! results (string-append (apply string-append priced) "total "
                                       (number->string total) " (priced at " here ")\n"))))
      (lambda ()
        (let ((data (gather-local-data)))
          (migrate-to remote-vault data)
          (process-remote data)
          (migrate-home results)))))
  (capabilities
    (read "/vault/pub/mobile/")
    (cas-write)
    (migrate (vaults (vault-a vault-b))))
  (constraints
    (max-migrations 2)
    (max-runtime 60)))
