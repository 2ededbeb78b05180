// The registries everything that registers itself by name goes through, and what transports
// say of themselves there: each folder of transports/ is one registered transport, routing
// takes the most preferred transport that reaches a pair, and the built-in tuning holds every
// transport's own costs.
#include <gtest/gtest.h>

#include <sstream>

#include "arcoll/error.hpp"
#include "arcoll/tuning.hpp"
#include "src/base/registry.hpp"
#include "transports/transport.hpp"

namespace arcoll {
namespace {

TEST(TransportRegistry, EveryBuiltFolderIsARegisteredTransport) {
  std::vector<std::string> folders;
  std::istringstream list(ARCOLL_TRANSPORT_FOLDERS);
  for (std::string name; std::getline(list, name, ',');) folders.push_back(name);
  ASSERT_FALSE(folders.empty());
  EXPECT_EQ(TransportRegistry::instance().names(), folders);
}

TEST(TransportRegistry, RoutingTakesTheMostPreferredThatReaches) {
  for (const bool same_host : {true, false}) {
    const TransportInfo& chosen = transport_for(same_host);
    EXPECT_TRUE(same_host || chosen.reach == Reach::any_host) << chosen.name;
    for (const TransportInfo* info : TransportRegistry::instance().all()) {
      const bool available = !info->available || info->available();
      if ((same_host || info->reach == Reach::any_host) && available) {
        EXPECT_LE(info->preference, chosen.preference) << info->name;
      }
      // A forced transport carries every pair.
      EXPECT_EQ(&transport_for(same_host, info->name), info);
    }
  }
  EXPECT_THROW(transport_for(true, "carrier-pigeon"), InvalidArgument);
}

TEST(TransportRegistry, WithinPlusAcrossNamesATransportForEachKindOfPair) {
  for (const TransportInfo* within : TransportRegistry::instance().all())
    for (const TransportInfo* across : TransportRegistry::instance().all()) {
      const std::string choice = within->name + "+" + across->name;
      if (across->reach != Reach::any_host) {
        EXPECT_NE(transport_choice_problem(choice).find("reaches ranks of one host only"),
                  std::string::npos)
            << choice;
        EXPECT_THROW(transport_for(false, choice), InvalidArgument) << choice;
        continue;
      }
      EXPECT_EQ(transport_choice_problem(choice), "") << choice;
      EXPECT_EQ(&transport_for(true, choice), within) << choice;
      EXPECT_EQ(&transport_for(false, choice), across) << choice;
      // "auto" on either side: the registry's choice for those pairs.
      EXPECT_EQ(&transport_for(true, "auto+" + across->name), &transport_for(true)) << choice;
      EXPECT_EQ(&transport_for(false, within->name + "+auto"), &transport_for(false)) << choice;
    }
  for (const char* bad :
       {"shm+carrier-pigeon", "carrier-pigeon+tcp", "shm+tcp+tcp", "+tcp", "shm+"}) {
    EXPECT_NE(transport_choice_problem(bad), "") << bad;
    EXPECT_THROW(transport_for(true, bad), InvalidArgument) << bad;
  }
}

TEST(TransportRegistry, BuiltInTuningHoldsEveryTransportsOwnCosts) {
  const Tuning defaults = default_tuning();
  ASSERT_EQ(defaults.transports.size(), TransportRegistry::instance().names().size());
  for (const TransportInfo* info : TransportRegistry::instance().all()) {
    const TransportCosts& c = defaults.transports.at(info->name);
    EXPECT_GT(c.latency_us, 0) << info->name;
    EXPECT_GT(c.bandwidth_gbs, 0) << info->name;
    EXPECT_GT(c.reduce_gbs, 0) << info->name;
    EXPECT_EQ(c.bandwidth_gbs, info->default_costs.bandwidth_gbs) << info->name;
  }
}

struct Fruit {
  static constexpr const char* kKind = "fruit";
  std::string name;
  int seeds = 0;
};

TEST(Registry, FindsByNameInOrderAndRefusesDuplicates) {
  Registry<Fruit>& fruits = Registry<Fruit>::instance();
  fruits.add({"pear", 5});
  fruits.add({"apple", 8});
  ASSERT_NE(fruits.find("pear"), nullptr);
  EXPECT_EQ(fruits.find("pear")->seeds, 5);
  EXPECT_EQ(fruits.find("plum"), nullptr);
  EXPECT_EQ(fruits.names(), (std::vector<std::string>{"apple", "pear"}));
  EXPECT_EQ(fruits.index_of("pear"), 1);
  EXPECT_EQ(fruits.index_of("plum"), -1);
  EXPECT_EQ(fruits.name_list(), "apple, pear");
  EXPECT_THROW(fruits.add({"apple", 3}), InternalError);
  EXPECT_EQ(fruits.find("apple")->seeds, 8);
}

}  // namespace
}  // namespace arcoll
