/* vault_agent.h: the host calls of a vault for agents written in C (or anything that links C)
 * and built for WebAssembly with Debian's clang and wasi-libc:
 *
 *   clang --target=wasm32-wasi -O2 -I sdk/wasm agent.c -o agent.wasm
 *   vaultctl spawn --sandbox wasm --code agent.wasm ...
 *
 * The module's _start runs (main, with wasi-libc). printf and the rest of stdio work: what the
 * agent writes to stdout and stderr becomes its log, a line at a time. The time (clock_gettime,
 * time) and random bytes (getentropy, arc4random) come from the vault, through the host, so that
 * the agent's run can be replayed. There is no file system but stdin (empty), stdout and stderr.
 *
 * Each call returns a google.rpc code: 0 is OK, 7 (VAULT_PERMISSION_DENIED) a denial (the agent
 * lacks the grant), 3 (VAULT_INVALID_ARGUMENT) a bad argument, a pointer or length outside the
 * agent's memory included, 8 (VAULT_RESOURCE_EXHAUSTED) an output buffer too small (the length
 * needed is still written) or a quota, and so on; docs/wasm.md lists them. Text outputs are not
 * NUL-terminated: their length is written to *out_len.
 *
 * Strong mobility: vault_migrate("vault-b") moves the running program; it returns 0 on vault-b,
 * where the program goes on with its locals, call stack, memory and globals as they were.
 * vault_checkpoint() captures the same way, so a restart of the vault resumes the program from
 * there. Neither needs the program to save anything itself.
 */
#ifndef VAULT_SDK_WASM_VAULT_AGENT_H_
#define VAULT_SDK_WASM_VAULT_AGENT_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VAULT_IMPORT(name) __attribute__((import_module("library"), import_name(name)))

enum {
  VAULT_OK = 0,
  VAULT_INVALID_ARGUMENT = 3,
  VAULT_DEADLINE_EXCEEDED = 4,
  VAULT_NOT_FOUND = 5,
  VAULT_PERMISSION_DENIED = 7,
  VAULT_RESOURCE_EXHAUSTED = 8,
  VAULT_FAILED_PRECONDITION = 9,
  VAULT_ABORTED = 10,
  VAULT_UNAVAILABLE = 14,
};

enum { VAULT_LOG_INFO = 0, VAULT_LOG_DEBUG = 1, VAULT_LOG_WARN = 2, VAULT_LOG_ERROR = 3 };

/* A digest as text: "sha256:<64 hex>/<size>", at most this many bytes. */
#define VAULT_DIGEST_MAX 92

/* A message, as vault_receive fills it. */
typedef struct vault_message {
  uint64_t id;
  uint64_t reply_to;
  uint32_t data_len; /* the whole data's length */
  uint32_t from_len;
  uint32_t type_len;
  char from[128]; /* the sending agent's id, or "operator" */
  char type[128];
} vault_message;

/* A line in the agent's log. */
VAULT_IMPORT("log") int32_t vault_log(int32_t level, const char* text, int32_t len);
/* Proves the agent alive; *checkpoint_wanted is 1 when the vault is stopping. */
VAULT_IMPORT("heartbeat") int32_t vault_heartbeat(uint32_t* checkpoint_wanted);
/* The state the agent was spawned with (from `offset`, at most `cap` bytes); *total is its size.
 * VAULT_NOT_FOUND when it has none. */
VAULT_IMPORT("get_state")
int32_t vault_get_state(uint64_t offset, char* buf, int32_t cap, uint32_t* out_len,
                        uint64_t* total);
/* Captures the whole run here: a restart of the vault resumes from this point. */
VAULT_IMPORT("checkpoint") int32_t vault_checkpoint(void);
/* Moves the running program to the member vault `vault`; returns 0 there. Returns here only
 * when the move did not happen (VAULT_PERMISSION_DENIED, VAULT_ABORTED, ...). */
VAULT_IMPORT("migrate") int32_t vault_migrate(const char* vault, int32_t len);
/* Stores an object; its digest as text goes to digest[0..*out_len). */
VAULT_IMPORT("cas_put")
int32_t vault_cas_put(const char* data, int32_t len, char* digest, int32_t cap, uint32_t* out_len);
/* Reads an object (from `offset`, at most `cap` bytes). */
VAULT_IMPORT("cas_get")
int32_t vault_cas_get(const char* digest, int32_t dlen, uint64_t offset, char* buf, int32_t cap,
                      uint32_t* out_len);
/* Sends a message to an agent (an id or a name), or to "operator" answering a query (reply_to:
 * the query's message id; 0 otherwise); its id goes to *out_id. */
VAULT_IMPORT("send")
int32_t vault_send(const char* to, int32_t tlen, const char* type, int32_t tylen, const char* data,
                   int32_t dlen, uint64_t reply_to, uint64_t* out_id);
/* The next message, waiting up to timeout_ms: VAULT_DEADLINE_EXCEEDED when none came;
 * VAULT_RESOURCE_EXHAUSTED when its data (msg->data_len bytes) does not fit in `cap` (the
 * message is kept: receive again with a larger buffer). */
VAULT_IMPORT("receive")
int32_t vault_receive(int64_t timeout_ms, vault_message* msg, char* data, int32_t cap);
/* {"agent_id":..., "vault":..., "principal":..., "home_vault":..., "hop":N} */
VAULT_IMPORT("self_inspect") int32_t vault_self_inspect(char* buf, int32_t cap, uint32_t* out_len);
/* GET a URL under a url grant; the body to buf, the HTTP status to *out_status. */
VAULT_IMPORT("http_get")
int32_t vault_http_get(const char* url, int32_t ulen, char* buf, int32_t cap, uint32_t* out_len,
                       uint32_t* out_status);
/* Spawns a child from a spec as text (docs/spec.md); state_len -1: no initial state. */
VAULT_IMPORT("spawn_child")
int32_t vault_spawn_child(const char* spec, int32_t slen, const char* state, int32_t state_len,
                          char* id, int32_t cap, uint32_t* out_len);
/* Lets the agent `agent` read an object. */
VAULT_IMPORT("share")
int32_t vault_share(const char* digest, int32_t dlen, const char* agent, int32_t alen);
/* Ends the agent with `code`, a message and (result_len >= 0) a result object. Returns only when
 * the vault refused the exit. */
VAULT_IMPORT("exit")
int32_t vault_exit(int32_t code, const char* msg, int32_t mlen, const char* result,
                   int32_t result_len);

#undef VAULT_IMPORT

#ifdef __cplusplus
}
#endif

#endif /* VAULT_SDK_WASM_VAULT_AGENT_H_ */
