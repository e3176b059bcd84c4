#include "vaultctl/command_groups.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace vault::vaultctl {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::Optional;

std::vector<std::string> TopLevelNames(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands({})) names.push_back(sub->get_name());
  return names;
}

// Builds the app vaultctl would for `words` (after "vaultctl").
struct Built {
  CLI::App app{"vaultctl", "vaultctl"};
  GlobalOptions global;
  Command command;
  explicit Built(std::vector<const char*> words) {
    words.insert(words.begin(), "vaultctl");
    AddGlobalOptions(app, global);
    AddCommandGroups(app, global, command, static_cast<int>(words.size()), words.data());
  }
};

TEST(CommandWordTest, SkipsGlobalOptionsAndTheirValues) {
  CLI::App app{"vaultctl", "vaultctl"};
  GlobalOptions global;
  AddGlobalOptions(app, global);
  auto word = [&](std::vector<const char*> words) {
    words.insert(words.begin(), "vaultctl");
    return CommandWord(app, static_cast<int>(words.size()), words.data());
  };
  EXPECT_THAT(word({"migrate", "a-1", "--to", "b"}), Optional(std::string_view("migrate")));
  EXPECT_THAT(word({"--vault", "status", "-o", "json", "--timeout", "3", "cas", "ls"}),
              Optional(std::string_view("cas")));
  EXPECT_THAT(word({"--vault=a.sock", "-ojson", "--timeout=3", "agent", "ls"}),
              Optional(std::string_view("agent")));
  EXPECT_THAT(word({"--config", "a/vault.conf", "--tls-cert", "c", "--tls-key", "k", "--tls-ca",
                    "ca", "--server-name", "b", "--output", "text", "federation", "status"}),
              Optional(std::string_view("federation")));
  EXPECT_EQ(word({"--help"}), std::nullopt);
  EXPECT_EQ(word({}), std::nullopt);
  EXPECT_EQ(word({"--", "status"}), std::nullopt);
  EXPECT_THAT(word({"-h", "status"}), Optional(std::string_view("status")));
  // Every global option that takes a value, by each of its names, with a command name as that
  // value: the command is the word after it.
  int with_value = 0;
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_items_expected_max() == 0) continue;  // a flag
    std::vector<std::string> names;
    for (const std::string& l : option->get_lnames()) names.push_back("--" + l);
    for (const std::string& s : option->get_snames()) names.push_back("-" + s);
    for (const std::string& name : names) {
      EXPECT_THAT(word({name.c_str(), "status", "cas", "ls"}), Optional(std::string_view("cas")))
          << name;
      ++with_value;
    }
  }
  EXPECT_EQ(with_value, 9);  // --vault --config --tls-cert --tls-key --tls-ca --server-name
                             // --timeout --output -o
}

// Each group adds exactly the names the table gives it; together they are every command, in
// the order of the help.
TEST(CommandGroupsTest, EachGroupAddsExactlyItsNames) {
  std::vector<std::string_view> all;
  for (const CommandGroup& group : CommandGroups()) {
    CLI::App app{"vaultctl", "vaultctl"};
    GlobalOptions global;
    Command command;
    AddGlobalOptions(app, global);
    group.add(app, global, command);
    EXPECT_THAT(TopLevelNames(app), ElementsAreArray(group.names));
    all.insert(all.end(), group.names.begin(), group.names.end());
  }
  Built full({"--help"});
  EXPECT_THAT(TopLevelNames(full.app), ElementsAreArray(all));
  EXPECT_EQ(all.size(), 13u);
}

// A command line naming a command builds its group alone, and that group's help (every
// subcommand's, recursively) is the one the full build gives.
TEST(CommandGroupsTest, ANamedCommandBuildsItsGroupAloneWithTheSameHelp) {
  Built full({"--help"});
  std::function<void(const CLI::App&, const CLI::App&)> same_help = [&](const CLI::App& got,
                                                                        const CLI::App& want) {
    EXPECT_EQ(got.help(), want.help()) << want.get_name();
    std::vector<const CLI::App*> got_subs = got.get_subcommands({});
    std::vector<const CLI::App*> want_subs = want.get_subcommands({});
    ASSERT_EQ(got_subs.size(), want_subs.size()) << want.get_name();
    for (size_t i = 0; i < got_subs.size(); ++i) same_help(*got_subs[i], *want_subs[i]);
  };
  for (const CommandGroup& group : CommandGroups()) {
    for (std::string_view name : group.names) {
      const std::string word(name);
      Built lazy({"--vault", "x.sock", word.c_str()});
      EXPECT_THAT(TopLevelNames(lazy.app), ElementsAreArray(group.names)) << name;
      for (std::string_view sub : group.names) {
        same_help(*lazy.app.get_subcommand(std::string(sub)),
                  *full.app.get_subcommand(std::string(sub)));
      }
    }
  }
}

TEST(CommandGroupsTest, AnUnknownWordBuildsEveryGroup) {
  Built unknown({"no-such-command"});
  Built full({});
  EXPECT_THAT(TopLevelNames(unknown.app), ElementsAreArray(TopLevelNames(full.app)));
  EXPECT_THAT(TopLevelNames(Built({"status"}).app), ElementsAre("status"));
}

}  // namespace
}  // namespace vault::vaultctl
