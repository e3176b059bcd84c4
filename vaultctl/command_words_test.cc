#include "vaultctl/command_words.h"

#include <optional>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "vaultctl/command_groups.h"
#include "vaultctl/commands.h"

namespace vault::vaultctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Optional;

// The check on the app vaultctl builds for `words` (after "vaultctl").
std::optional<std::string> Check(std::vector<const char*> words) {
  words.insert(words.begin(), "vaultctl");
  CLI::App app{"vaultctl", "vaultctl"};
  app.require_subcommand(1);
  GlobalOptions global;
  Command command;
  AddGlobalOptions(app, global);
  AddCommandGroups(app, global, command, static_cast<int>(words.size()), words.data());
  return CheckCommandWords(app, static_cast<int>(words.size()), words.data());
}

TEST(CommandWordsTest, ATypoNamesTheNearestCommand) {
  EXPECT_THAT(Check({"cas", "lss"}),
              Optional(std::string("unknown command \"lss\" for \"vaultctl cas\": did you mean "
                                   "\"ls\"? (vaultctl cas --help lists its commands)")));
  EXPECT_THAT(Check({"staus"}), Optional(HasSubstr("did you mean \"status\"?")));
  EXPECT_THAT(Check({"agnet", "ls"}), Optional(HasSubstr("did you mean \"agent\"?")));
  // Global options and their values, before and after the command words, are skipped.
  EXPECT_THAT(Check({"-o", "json", "cas", "--timeout", "3", "lss"}),
              Optional(HasSubstr("\"lss\" for \"vaultctl cas\"")));
  EXPECT_THAT(Check({"--vault=a.sock", "audit", "tial"}),
              Optional(HasSubstr("did you mean \"tail\"?")));
}

TEST(CommandWordsTest, AWordNearNothingListsTheCommands) {
  // With --help after it: not the group's help with exit 0.
  std::optional<std::string> e = Check({"agent", "inspect", "--help"});
  ASSERT_TRUE(e.has_value());
  EXPECT_THAT(*e, HasSubstr("unknown command \"inspect\" for \"vaultctl agent\" (its commands: "));
  EXPECT_THAT(*e, HasSubstr("status"));
}

TEST(CommandWordsTest, KnownCommandsAndTheirArgumentsPass) {
  EXPECT_EQ(Check({"cas", "ls"}), std::nullopt);
  EXPECT_EQ(Check({"--vault", "x.sock", "cas", "put", "lss"}), std::nullopt);  // a file named lss
  EXPECT_EQ(Check({"migrate", "a-1", "--to", "b"}), std::nullopt);
  EXPECT_EQ(Check({"agent", "--help"}), std::nullopt);
  EXPECT_EQ(Check({"--help"}), std::nullopt);
  EXPECT_EQ(Check({}), std::nullopt);
  EXPECT_EQ(Check({"--", "lss"}), std::nullopt);
  EXPECT_EQ(Check({"audit", "proof", "--help"}), std::nullopt);
}

// -o is the output format everywhere: a file name given to it is refused with where files go.
TEST(CommandWordsTest, DashOIsTheOutputFormatNotAFile) {
  std::vector<const char*> words = {"vaultctl", "cas", "get", "sha256:x/1", "-o", "copy"};
  CLI::App app{"vaultctl", "vaultctl"};
  app.fallthrough();  // as main.cc: global options may follow the command
  GlobalOptions global;
  Command command;
  AddGlobalOptions(app, global);
  AddCommandGroups(app, global, command, static_cast<int>(words.size()), words.data());
  try {
    app.parse(static_cast<int>(words.size()), words.data());
    ADD_FAILURE() << "-o copy was accepted";
  } catch (const CLI::ValidationError& e) {
    EXPECT_THAT(std::string(e.what()),
                HasSubstr("-o is the output format, text or json, not \"copy\" (to write an "
                          "object to a file: vaultctl cas get DIGEST --out FILE)"));
  }
  std::vector<const char*> ok = {"vaultctl", "cas",  "get", "sha256:x/1",
                                 "-O",       "copy", "-o",  "json"};
  CLI::App app2{"vaultctl", "vaultctl"};
  app2.fallthrough();
  GlobalOptions global2;
  Command command2;
  AddGlobalOptions(app2, global2);
  AddCommandGroups(app2, global2, command2, static_cast<int>(ok.size()), ok.data());
  EXPECT_NO_THROW(app2.parse(static_cast<int>(ok.size()), ok.data()));
  EXPECT_EQ(global2.output, "json");
}

TEST(CommandWordsTest, Nearest) {
  const std::vector<std::string> words = {"ls", "put", "get", "status", "replicate"};
  EXPECT_EQ(Nearest("lss", words), "ls");
  EXPECT_EQ(Nearest("pt", words), "put");
  EXPECT_EQ(Nearest("satuts", words), "status");   // two edits
  EXPECT_EQ(Nearest("stauts", words), "status");   // a swap is one
  EXPECT_EQ(Nearest("repl", words), "replicate");  // a prefix
  EXPECT_EQ(Nearest("inspect", words), "");
  EXPECT_EQ(Nearest("xyz", words), "");
}

}  // namespace
}  // namespace vault::vaultctl
