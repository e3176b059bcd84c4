;; Pattern 2, one-shot, as a Scheme agent: the RFC's code as written, with process defined around
;; it. It counts the words of one object and puts the count in the CAS; its procedure returns what
;; cas-put answered, so the agent's result names the object it put. input-hash is given twice at
;; spawn: to the grant, by --bind (the hash alone), and to the code, as the initial state (the
;; whole digest, which cas-get takes):
;;
;;   echo -n sha256:<hex>/<size> > input.txt
;;   vaultctl agent spawn sdk/scheme/examples/one-shot.scm --as owner.key \
;;       --bind input-hash=sha256:<hex> --state input.txt
(spawn-agent
  (purpose "count the words of one object")
  (code
   '(let ()
      (define input-hash (utf8->string (get-state)))
      (define (process input)
        (let ((words (string-tokenize (utf8->string input))))
          (string-append (number->string (length words)) " words\n")))
      (lambda ()
        (let ((input (cas-get input-hash)))
          (let ((result (process input)))
            (cas-put result))))))
  (capabilities
    (read (hash input-hash))
    (cas-write))
  (constraints
    (max-runtime 3600)
    (max-memory (* 1024 1024 1024))))
