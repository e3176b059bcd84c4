// vaultctl/command_words: the command words of a command line checked before CLI11 parses it, so
// that a mistyped command is named, with the nearest one, instead of CLI11's "A subcommand is
// required" (or, with --help after it, the group's help and exit 0):
//
//   vaultctl cas lss          ->  unknown command "lss" for "vaultctl cas": did you mean "ls"?
//   vaultctl agent inspect    ->  unknown command "inspect" for "vaultctl agent" (its commands:
//                                 ls, status, ...)
//
//   if (std::optional<std::string> e = CheckCommandWords(app, argc, argv)) { ...exit 2... }
//
// Options (and the values of those that take one, at any level, as global options may follow a
// command) are skipped; the check ends at the first word of a command that takes no further
// command, and at "--".
//
// Thread-safety: reads `app` only.
#ifndef VAULT_VAULTCTL_COMMAND_WORDS_H_
#define VAULT_VAULTCTL_COMMAND_WORDS_H_

#include <CLI/CLI.hpp>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace vault::vaultctl {

// The error for the first word that names no command where one is needed; nullopt when every
// command word is known.
std::optional<std::string> CheckCommandWords(CLI::App& app, int argc, const char* const* argv);

// The candidate nearest to `word` (edit distance, a transposition counting 1) when it is near
// enough to be a likely typo (at most 1 edit for words of up to 4 letters, 2 beyond), or a
// candidate `word` is a prefix of; empty when none is.
std::string Nearest(absl::string_view word, const std::vector<std::string>& candidates);

}  // namespace vault::vaultctl

#endif  // VAULT_VAULTCTL_COMMAND_WORDS_H_
