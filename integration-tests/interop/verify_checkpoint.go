// verify_checkpoint: an independent verifier of a vault's audit checkpoint and proofs, built on
// Go's golang.org/x/mod/sumdb/note (C2SP signed notes) and golang.org/x/mod/sumdb/tlog (RFC 6962
// / RFC 9162 Merkle trees: RecordHash = SHA-256(0x00 || data), NodeHash = SHA-256(0x01 || l || r),
// split at the largest power of two below the size; its ct_test.go checks it against real
// Certificate Transparency proofs). It shares no code with the vault. interop_test.cc runs it.
//
//	verify_checkpoint -vkey VERIFIER_KEY -checkpoint NOTE_FILE [-origin ORIGIN]
//	    [-inclusion PROOF_JSON -entry ENTRY_BYTES_FILE] [-consistency PROOF_JSON]
//
// The proof files are the output of `vaultctl -o json audit proof inclusion SEQ` and
// `vaultctl -o json audit proof consistency OLD NEW`. Prints one "ok: ..." line per check and
// exits 0; on the first failure prints "FAIL: ..." with the Go error to stderr and exits 1
// (2 for usage errors).
//
// Build offline (Debian 12: golang-go, golang-golang-x-mod-dev):
//
//	GO111MODULE=off GOPATH=/usr/share/gocode GOFLAGS= go build verify_checkpoint.go
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

type inclusionProof struct {
	Index    *int64   `json:"index"`
	Size     *int64   `json:"size"`
	LeafHash string   `json:"leaf_hash"`
	Hashes   []string `json:"hashes"`
	Root     string   `json:"root"`
}

type consistencyProof struct {
	Size1  *int64   `json:"size1"`
	Size2  *int64   `json:"size2"`
	Root1  string   `json:"root1"`
	Root2  string   `json:"root2"`
	Hashes []string `json:"hashes"`
}

type checkpoint struct {
	origin string
	size   int64
	root   tlog.Hash
}

func fail(format string, args ...interface{}) {
	fmt.Fprintf(os.Stderr, "FAIL: "+format+"\n", args...)
	os.Exit(1)
}

func readFile(what, path string) []byte {
	b, err := os.ReadFile(path)
	if err != nil {
		fail("reading %s: %v", what, err)
	}
	return b
}

// parseCheckpoint parses a C2SP tlog-checkpoint body: origin, decimal size, base64 root, then
// optional non-empty extension lines.
func parseCheckpoint(text string) (checkpoint, error) {
	if !strings.HasSuffix(text, "\n") {
		return checkpoint{}, fmt.Errorf("checkpoint body does not end in a newline")
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) < 3 {
		return checkpoint{}, fmt.Errorf("checkpoint body has %d lines, want at least 3", len(lines))
	}
	var cp checkpoint
	cp.origin = lines[0]
	if cp.origin == "" {
		return checkpoint{}, fmt.Errorf("empty checkpoint origin")
	}
	size, err := strconv.ParseInt(lines[1], 10, 64)
	if err != nil || size < 0 || strconv.FormatInt(size, 10) != lines[1] {
		return checkpoint{}, fmt.Errorf("malformed checkpoint size %q", lines[1])
	}
	cp.size = size
	if cp.root, err = tlog.ParseHash(lines[2]); err != nil {
		return checkpoint{}, fmt.Errorf("checkpoint root %q: %v", lines[2], err)
	}
	for _, ext := range lines[3:] {
		if ext == "" {
			return checkpoint{}, fmt.Errorf("empty checkpoint extension line")
		}
	}
	return cp, nil
}

func parseHashes(list []string) ([]tlog.Hash, error) {
	out := make([]tlog.Hash, 0, len(list))
	for i, s := range list {
		h, err := tlog.ParseHash(s)
		if err != nil {
			return nil, fmt.Errorf("proof hash %d %q: %v", i, s, err)
		}
		out = append(out, h)
	}
	return out, nil
}

func decodeJSON(what, path string, v interface{}) {
	dec := json.NewDecoder(bytes.NewReader(readFile(what, path)))
	if err := dec.Decode(v); err != nil {
		fail("parsing %s: %v", what, err)
	}
}

func main() {
	vkey := flag.String("vkey", "", "note verifier key <name>+<hex id>+<base64 key>")
	cpPath := flag.String("checkpoint", "", "file with the signed checkpoint note")
	wantOrigin := flag.String("origin", "", "expected checkpoint origin (optional)")
	incPath := flag.String("inclusion", "", "inclusion proof JSON (vaultctl -o json audit proof inclusion)")
	entryPath := flag.String("entry", "", "the raw bytes of the proven entry")
	conPath := flag.String("consistency", "", "consistency proof JSON (vaultctl -o json audit proof consistency)")
	flag.Parse()
	if *vkey == "" || *cpPath == "" || flag.NArg() != 0 || (*incPath == "") != (*entryPath == "") {
		fmt.Fprintln(os.Stderr, "usage: verify_checkpoint -vkey KEY -checkpoint FILE [-origin O] "+
			"[-inclusion JSON -entry FILE] [-consistency JSON]")
		os.Exit(2)
	}

	// The signed note.
	verifier, err := note.NewVerifier(*vkey)
	if err != nil {
		fail("note.NewVerifier: %v", err)
	}
	n, err := note.Open(readFile("checkpoint", *cpPath), note.VerifierList(verifier))
	if err != nil {
		fail("note.Open: %v", err)
	}
	fmt.Printf("ok: note signed by %s+%08x\n", verifier.Name(), verifier.KeyHash())
	fmt.Printf("verified text:\n%s", n.Text)
	cp, err := parseCheckpoint(n.Text)
	if err != nil {
		fail("%v", err)
	}
	if *wantOrigin != "" && cp.origin != *wantOrigin {
		fail("checkpoint origin %q, want %q", cp.origin, *wantOrigin)
	}
	fmt.Printf("ok: checkpoint origin %q size %d root %s\n", cp.origin, cp.size, cp.root)

	// Inclusion of the entry in the signed tree.
	if *incPath != "" {
		var p inclusionProof
		decodeJSON("inclusion proof", *incPath, &p)
		if p.Index == nil || p.Size == nil {
			fail("inclusion proof without index or size")
		}
		if *p.Size != cp.size {
			fail("inclusion proof is for tree size %d, the checkpoint's is %d", *p.Size, cp.size)
		}
		if p.Root != cp.root.String() {
			fail("inclusion proof root %s differs from the checkpoint's %s", p.Root, cp.root)
		}
		leaf := tlog.RecordHash(readFile("entry", *entryPath))
		if p.LeafHash != leaf.String() {
			fail("served leaf_hash %s, but RecordHash(entry bytes) = %s", p.LeafHash, leaf)
		}
		hashes, err := parseHashes(p.Hashes)
		if err != nil {
			fail("inclusion proof: %v", err)
		}
		if err := tlog.CheckRecord(tlog.RecordProof(hashes), cp.size, cp.root, *p.Index, leaf); err != nil {
			fail("tlog.CheckRecord(entry %d, size %d): %v", *p.Index, cp.size, err)
		}
		fmt.Printf("ok: inclusion of entry %d (leaf %s) in checkpoint of size %d (%d hashes)\n",
			*p.Index, leaf, cp.size, len(hashes))
	}

	// Consistency of an older tree with the signed one.
	if *conPath != "" {
		var p consistencyProof
		decodeJSON("consistency proof", *conPath, &p)
		if p.Size1 == nil || p.Size2 == nil {
			fail("consistency proof without size1 or size2")
		}
		root1, err := tlog.ParseHash(p.Root1)
		if err != nil {
			fail("consistency proof root1 %q: %v", p.Root1, err)
		}
		root2, err := tlog.ParseHash(p.Root2)
		if err != nil {
			fail("consistency proof root2 %q: %v", p.Root2, err)
		}
		if *p.Size2 != cp.size || root2 != cp.root {
			fail("consistency proof ends at size %d root %s, the checkpoint is size %d root %s",
				*p.Size2, root2, cp.size, cp.root)
		}
		hashes, err := parseHashes(p.Hashes)
		if err != nil {
			fail("consistency proof: %v", err)
		}
		if err := tlog.CheckTree(tlog.TreeProof(hashes), *p.Size2, root2, *p.Size1, root1); err != nil {
			fail("tlog.CheckTree(size %d -> %d): %v", *p.Size1, *p.Size2, err)
		}
		fmt.Printf("ok: consistency of size %d (root %s) with checkpoint of size %d (%d hashes)\n",
			*p.Size1, root1, *p.Size2, len(hashes))
	}
}
