;;; sandbox/scheme/runner.scm: the Scheme side of vault-scheme-runner (runner.cc defines the
;;; host calls in (vault host) before it loads this file).
;;;
;;; An agent's code is read here, expanded and compiled in a module of safe bindings only (the
;;; pure and mutating bindings of (ice-9 sandbox), without its clocks: time comes only through the
;;; host), and run. With a computation budget (max-steps), every procedure entry costs one step:
;;; the compiled code is instrumented before it becomes bytecode, so a loop, which in Scheme is a
;;; procedure call, cannot run without paying. The counter lives in (vault fuel), which the
;;; agent's module cannot name. Deep recursion ends with "stack exhausted". With an allocation
;;; budget (max-allocation), the bytes the collector has handed out since the agent started are
;;; checked after each collection (ice-9 sandbox's call-with-allocation-limit), and the agent
;;; ends with "allocation limit" once past it; the posix sandbox's memory limit stays behind it.
;;;
;;; Nothing here knows of mobility: the agent's code has no clock, randomness or input but its
;;; host calls, so the vault can move or restart it by re-running it with every call answered
;;; from its effect log (docs/replay.md). migrate-to is a host call that, at the destination,
;;; returns.

(define-module (vault fuel)
  #:export (fuel exhausted))

(define fuel 0)
(define (exhausted) (throw 'vault-limit "fuel exhausted"))

(define-module (vault api)
  #:use-module (vault host)
  #:export (log exit sleep agent-send agent-receive migrate-to migrate-home share spawn-child))

(define (text x) (if (string? x) x (object->string x display)))

;; (log "a" 'b 3): the parts, displayed and joined.
(define (log . parts) (%log (apply string-append (map text parts))))
;; The vault's exit: the agent ends with this code and message, and `result` (a string or a
;; bytevector), when given, stored in the CAS as its result.
(define* (exit #:optional (code 0) (message "") (result #f))
  (%exit code (text message) result)
  (primitive-exit code))
(define (sleep seconds) (%sleep seconds))
;; (agent-send to type data): `to` an agent id or name, `type` a message type (strings or
;; symbols), `data` a string or bytevector.
(define (agent-send to type data) (%send (text to) (text type) data))
;; (agent-receive #:timeout ms), or the RFC's (agent-receive timeout: ms): the next message as
;; ((id . N) (from . "a-...") (type . "...") (data . #vu8(...))), or #f when none came.
(define* (agent-receive #:key (timeout 86400000)) (%receive timeout))
;; (share digest agents): lets the agents (ids or names, a list or one) cas-get the object.
(define (share digest agents)
  (%share digest (map text (if (list? agents) agents (list agents)))))
;; (spawn-child spec #:optional state): a child agent, of `spec` (the datum '(spawn-agent ...)
;; or its text), at most the parent's authority; returns its id. Its code may be inline:
;; (code '(lambda () ...)).
(define* (spawn-child spec #:optional state)
  (%spawn-child (if (string? spec) spec (object->string spec write)) state))
;; (migrate-to vault data): moves the agent to `vault`, where this call returns `data` and the
;; code goes on (the RFC's pattern 4). The vault re-runs the code there with every host call
;; answered from the agent's effect log, nothing done again, until it reaches this call
;; (docs/replay.md). A hop that does not happen raises a host-error.
(define* (migrate-to vault #:optional data) (%migrate (text vault)) data)
;; (migrate-home data): migrate-to the vault the agent was spawned on.
(define* (migrate-home #:optional data)
  (migrate-to (cdr (assq 'home-vault (self-inspect))) data))

(define-module (vault runner)
  #:use-module (ice-9 sandbox)
  #:use-module (rnrs bytevectors)
  #:use-module (language tree-il)
  #:use-module (srfi srfi-1)
  #:use-module (system base compile)
  #:use-module (system vm vm)
  #:use-module (vault fuel)
  #:use-module (vault host)
  #:export (run-agent))

(define agent-bindings
  (append
   (remove (lambda (b) (member b clock-bindings)) all-pure-and-impure-bindings)
   '(((guile) set!)
     ((rnrs bytevectors) bytevector? bytevector-length bytevector-u8-ref utf8->string
      string->utf8 bytevector->u8-list u8-list->bytevector)
     ((vault host) get-state checkpoint cas-put cas-get read-file write-file list-directory
      http-get self-inspect)
     ((vault api) log exit sleep agent-send agent-receive migrate-to migrate-home share
      spawn-child))))

(define (fuel-ref) (make-module-ref #f '(vault fuel) 'fuel #f))

;; body → (begin (set! fuel (- fuel 1)) (if (< fuel 0) (exhausted) body))
(define (tick body)
  (make-seq #f
            (make-module-set #f '(vault fuel) 'fuel #f
                             (make-primcall #f '- (list (fuel-ref) (make-const #f 1))))
            (make-conditional #f
                              (make-primcall #f '< (list (fuel-ref) (make-const #f 0)))
                              (make-call #f (make-module-ref #f '(vault fuel) 'exhausted #f) '())
                              body)))

(define (instrument exp)
  (post-order
   (lambda (x)
     (if (lambda-case? x)
         (make-lambda-case (lambda-case-src x) (lambda-case-req x) (lambda-case-opt x)
                           (lambda-case-rest x) (lambda-case-kw x) (lambda-case-inits x)
                           (lambda-case-gensyms x) (tick (lambda-case-body x))
                           (lambda-case-alternate x))
         x))
   exp))

(define (read-forms path)
  (read-set! keywords 'postfix)  ; the RFC writes keywords as timeout:
  (call-with-input-file path
    (lambda (port)
      (let loop ((forms '()))
        (let ((form (read port)))
          (if (eof-object? form) (reverse forms) (loop (cons form forms))))))))

;; Each top-level form in turn; the last one's value, when it is a procedure of no arguments
;; (the RFC's (lambda () ...)), is then called: it is the agent.
(define (evaluate forms env counted?)
  (let loop ((forms forms) (value *unspecified*))
    (if (null? forms)
        (if (procedure? value) (value) value)
        (let* ((tree (compile (car forms) #:from 'scheme #:to 'tree-il #:env env))
               (tree (if counted? (instrument tree) tree)))
          ;; -O1: half the compile time of -O2 at spawn (the passes it skips are the slow ones to
          ;; load), for code that runs about a third as fast in tight loops (bench/README.md).
          (loop (cdr forms)
                (compile tree #:from 'tree-il #:to 'value #:env env #:optimization-level 1))))))

(define (reason key args)
  (case key
    ((vault-limit) (car args))
    (else (string-append "error: "
                         (string-trim-right
                          (with-output-to-string
                            (lambda () (print-exception (current-output-port) #f key args))))))))

;; Runs the agent's code at `path`; returns the process's exit code. The vault hears of every
;; end through the exit host call, with its reason.
(define (run-agent path)
  (let* ((steps (%budget "VAULT_MAX_STEPS"))
         (bytes (%budget "VAULT_MAX_ALLOCATION"))
         (env (make-sandbox-module agent-bindings))
         (go (lambda () (evaluate (read-forms path) env (and steps #t))))
         (allocating
          (if bytes
              (lambda ()
                (call-with-allocation-limit
                 bytes go (lambda () (throw 'vault-limit "allocation limit"))))
              go))
         (limited
          (lambda ()
            (call-with-stack-overflow-handler
             (* 8 1024 1024) allocating (lambda () (throw 'vault-limit "stack exhausted"))))))
    (module-set! (resolve-module '(vault fuel)) 'fuel (or steps 0))
    (catch #t
      ;; What the agent's procedure returns, a string or a bytevector, is its result.
      (lambda ()
        (let ((value (limited)))
          (%exit 0 "" (and (or (string? value) (bytevector? value)) value))
          0))
      (lambda (key . args)
        (let ((why (reason key args)))
          (display why (current-error-port))
          (newline (current-error-port))
          (%exit (if (eq? key 'vault-limit) 3 1) why #f)
          (if (eq? key 'vault-limit) 3 1))))))
